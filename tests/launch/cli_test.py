"""launch.cli: GPU memory flags, XLA CPU's thread pool, the CPU overlay
(configs/cpu.py), malloc tuning and the compilation cache, in this process."""

import os
from unittest import mock

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import jax
import pytest

from configs import cpu as cpu_config
from configs import dyck as dyck_config
from launch import cli
from tests import cli_helpers
from tests import simulate_helpers
from ut.cpu import host
from ut.training import implementation


class GpuMemoryTest(absltest.TestCase):
  """--gpu_preallocate and --gpu_memory_fraction set JAX's variables."""

  def test_flags_set_the_variables(self):
    environ = {}
    cli.gpu_memory(False, 0.3, environ)
    self.assertEqual(
        environ,
        {
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3",
        },
    )

  def test_unset_flags_keep_the_variables(self):
    environ = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}
    cli.gpu_memory(None, None, environ)
    self.assertEqual(environ, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"})

  def test_bad_fraction_is_a_user_error(self):
    for fraction in (0.0, 1.5, -0.1):
      with self.assertRaisesRegex(cli.UserError, "use a share in"):
        cli.gpu_memory(None, fraction, {})

  @pytest.mark.slow
  def test_bad_fraction_is_one_line_from_the_command(self):
    cli_helpers.assert_one_line_error(
        self,
        simulate_helpers.run_simulate("--gpu_memory_fraction=2"),
        r"--gpu_memory_fraction=2.0; use a share in \(0, 1\]",
    )


class CpuThreadsTest(parameterized.TestCase):
  """XLA CPU's thread pool: cpu.threads, launch.train's per-run rule, and the
  backend started with a smaller pool and the whole affinity mask after."""

  def parse(self, *overrides):
    argv = ["prog", "--config=configs/dyck.py:smoke", *overrides]
    flag_values = flags.FlagValues()
    cli.define_config_flag(
        "config", "Config.", flag_values=flag_values, sys_argv=argv
    )
    flag_values(argv)
    return flag_values

  @parameterized.named_parameters(
      ("auto_is_xla_default", (), None),
      ("zero_is_xla_default", ("--config.cpu.threads=0",), None),
      ("a_number", ("--config.cpu.threads=1",), 1),
  )
  def test_cpu_threads(self, overrides, expected):
    self.assertEqual(cli.cpu_threads(self.parse(*overrides)), expected)

  def test_bad_threads_is_a_user_error(self):
    with self.assertRaisesRegex(cli.UserError, "cpu.threads='two'; use auto"):
      cli.cpu_threads(self.parse("--config.cpu.threads=two"))


class HostSettingsTest(parameterized.TestCase):
  """launch.cli's CPU overlay (configs/cpu.py), malloc tuning and compilation
  cache, in this process; the backend's name is patched to stand for a CPU or
  an accelerator host."""

  def parse(self, *overrides, config="configs/dyck.py:smoke"):
    """A launcher's --config (cli.define_config_flag) as it parses argv:
    (the config, the flags)."""
    argv = ["prog", f"--config={config}", *overrides]
    flag_values = flags.FlagValues()
    holder = cli.define_config_flag(
        "config", "Config.", flag_values=flag_values, sys_argv=argv
    )
    flag_values(argv)
    return holder.value, flag_values

  def test_overlay_is_kept_on_cpu_and_removed_elsewhere(self):
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      config = cli.hardware_overlay(self.parse()[0])
      self.assertEqual(config.cpu.to_dict(), cpu_config.get_config().to_dict())
      self.assertTrue(config.is_locked)
      # A config built in Python (no --config flag) gains the section too.
      self.assertIn(
          "cpu", cli.hardware_overlay(dyck_config.get_config("smoke"))
      )
    for backend in ("gpu", "tpu"):
      with mock.patch.object(jax, "default_backend", return_value=backend):
        config = cli.hardware_overlay(self.parse()[0])
        self.assertNotIn("cpu", config)
        self.assertTrue(config.is_locked)
        self.assertIsNone(implementation.configured_microbatches(config))

  def test_cpu_field_overrides(self):
    config, _ = self.parse(
        "--config.cpu.ynn_fusions=False", "--config.cpu.microbatches=2"
    )
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      config = cli.hardware_overlay(config)
      self.assertFalse(config.cpu.ynn_fusions)
      self.assertEqual(implementation.configured_microbatches(config), 2)
      self.assertEqual(
          implementation.compiler_options(config),
          dict(compiler_options=dict(xla_cpu_experimental_ynn_fusion_type="")),
      )
    with mock.patch.object(jax, "default_backend", return_value="tpu"):
      cli_helpers.assert_user_error(
          self,
          r"config.cpu is for CPU hosts, and JAX runs on tpu",
          cli.hardware_overlay,
          self.parse("--config.cpu.ynn_fusions=False")[0],
      )

  def test_malloc_is_tuned_on_cpu_only(self):
    _, flag_values = self.parse()
    for cpu, calls in ((False, 0), (True, 1)):
      with (
          mock.patch.object(host, "cpu_expected", return_value=cpu),
          mock.patch.object(host, "tune_malloc", return_value=True) as tune,
          mock.patch.object(host, "numpy_hugepages"),
      ):
        self.assertEqual(cli.tune_host(flag_values), bool(calls))
        self.assertEqual(tune.call_count, calls)
    # --config.cpu.tune_malloc=False turns it off on CPU too.
    _, flag_values = self.parse("--config.cpu.tune_malloc=False")
    with (
        mock.patch.object(host, "cpu_expected", return_value=True),
        mock.patch.object(host, "tune_malloc", return_value=True) as tune,
        mock.patch.object(host, "numpy_hugepages"),
    ):
      self.assertFalse(cli.tune_host(flag_values))
      tune.assert_not_called()

  def test_numpy_hugepages_follow_the_config_on_cpu_only(self):
    for flags_, cpu, calls in (
        ((), False, []),
        ((), True, [False]),  # configs/cpu.py's value.
        (("--config.cpu.numpy_hugepages=True",), True, [True]),
    ):
      _, flag_values = self.parse(*flags_)
      with (
          mock.patch.object(host, "cpu_expected", return_value=cpu),
          mock.patch.object(host, "tune_malloc", return_value=True),
          mock.patch.object(host, "numpy_hugepages") as hugepages,
      ):
        cli.tune_host(flag_values)
      self.assertEqual(
          [c.args[0] for c in hugepages.call_args_list], calls, flags_
      )
    # A `cpu` section saved before the field existed: configs/cpu.py's value.
    _, flag_values = self.parse()
    with flag_values["config"].value.unlocked():
      del flag_values["config"].value.cpu["numpy_hugepages"]
    with (
        mock.patch.object(host, "cpu_expected", return_value=True),
        mock.patch.object(host, "tune_malloc", return_value=True),
        mock.patch.object(host, "numpy_hugepages") as hugepages,
    ):
      cli.tune_host(flag_values)
    hugepages.assert_called_once_with(False)

  def test_compilation_cache(self):
    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    before = {n: getattr(jax.config, n) for n in names}
    # Nothing compiles in between: this process keeps no cache afterwards.
    self.addCleanup(
        lambda: [jax.config.update(n, v) for n, v in before.items()]
    )
    folder = self.create_tempdir().full_path
    with mock.patch.dict(os.environ, {"UT_JAX_CACHE": folder}):
      self.assertEqual(cli.use_compilation_cache(), folder)
    self.assertEqual([getattr(jax.config, n) for n in names], [folder, 0, -1])
    jax.config.update("jax_compilation_cache_dir", None)
    with mock.patch.dict(os.environ, {"UT_JAX_CACHE": ""}):
      self.assertIsNone(cli.use_compilation_cache())
    self.assertIsNone(jax.config.jax_compilation_cache_dir)
    with mock.patch.dict(os.environ, {"HOME": folder}):
      os.environ.pop("UT_JAX_CACHE", None)
      self.assertEqual(
          cli.use_compilation_cache(), os.path.join(folder, ".cache/ut/jax")
      )

  def test_suite_compiles_through_the_persistent_cache(self):
    # tests/conftest.py turns it on as the launchers do (empty: off).
    path = os.environ.get("UT_JAX_CACHE", cli.DEFAULT_JAX_CACHE)
    self.assertEqual(
        jax.config.jax_compilation_cache_dir,
        os.path.expanduser(path) if path else None,
    )


if __name__ == "__main__":
  absltest.main()
