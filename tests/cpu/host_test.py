"""ut.cpu.host: the backend started with a smaller pool, NumPy's hugepage
switch, and whether JAX will run on CPU, told before any backend starts."""

import os
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from tests import paths
from ut.cpu import host

ROOT = paths.ROOT


class CpuThreadsTest(parameterized.TestCase):
  """XLA CPU's thread pool: cpu.threads, launch.train's per-run rule, and the
  backend started with a smaller pool and the whole affinity mask after."""

  @pytest.mark.slow  # A fresh process: the backend starts once a process.
  def test_start_backend_restores_the_affinity_mask(self):
    code = (
        "import os; from ut.cpu import host; mask = os.sched_getaffinity(0);"
        " host.start_backend(1);"
        " tids = os.listdir('/proc/self/task');"
        " print(all(os.sched_getaffinity(int(t)) == mask for t in tids),"
        " len(tids) > 1)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    self.assertEqual(out.stdout.split(), ["True", "True"])


class HostSettingsTest(parameterized.TestCase):
  """launch.cli's CPU overlay (configs/cpu.py), malloc tuning and compilation
  cache, in this process; the backend's name is patched to stand for a CPU or
  an accelerator host."""

  def test_numpy_hugepages_switch_returns_the_previous_setting(self):
    before = host.numpy_hugepages(True)
    if before is None:
      self.skipTest("this NumPy has no madvise hugepage switch")
    try:
      self.assertTrue(host.numpy_hugepages(False))
      self.assertFalse(host.numpy_hugepages(False))
      self.assertFalse(host.numpy_hugepages(True))
    finally:
      host.numpy_hugepages(before)

  def test_cpu_expected_without_starting_a_backend(self):
    self.assertTrue(host.cpu_expected("cpu"))
    self.assertFalse(host.cpu_expected("cuda,cpu"))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TPU_LIBRARY_PATH", "PJRT_NAMES_AND_LIBRARY_PATHS")
    }
    with (
        mock.patch.dict(os.environ, env, clear=True),
        mock.patch("importlib.metadata.entry_points", return_value=[]),
    ):
      for installed, cpu in (
          (None, True),
          ("libtpu", False),
          ("jax_plugins", False),
      ):
        with mock.patch(
            "importlib.util.find_spec",
            side_effect=lambda name, i=installed: name == i or None,
        ):
          self.assertEqual(host.cpu_expected(""), cpu, installed)


if __name__ == "__main__":
  absltest.main()
