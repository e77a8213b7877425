"""The simulate command as a user runs it: bring-your-own target, and bad input.

Most tests call what `launch.simulate` calls (`simulate_table.run_target_file`
and `run_table`, in float64 mode as the command sets it) on a config built
here; the tests marked slow run the command itself.
"""

import json
import os
import subprocess
import sys
from unittest import mock

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import pytest

from configs import cpu as cpu_config
from configs import dyck as dyck_config
from configs import khop as khop_config
from configs import simulate as simulate_config
from launch import cli
from tests import cli_helpers
from tests import reference
from ut.cpu import host
from ut.experiments import simulate_table
from ut.training import implementation
from ut.training import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_with(**fields):
  """configs/simulate.py with --config.<field>=value overrides."""
  config = simulate_config.get_config()
  config.update(fields)
  return config


def simulate_target(**fields):
  """launch.simulate's bring-your-own-target mode, in this process."""
  with jax.enable_x64(True):  # As the command: float64 unless x64=False.
    return simulate_table.run_target_file(config_with(**fields))


def simulate_grid(workdir, **fields):
  """launch.simulate's table mode, in this process."""
  with jax.enable_x64(True):
    return simulate_table.run_table(config_with(**fields), workdir)


def run_simulate(*overrides):
  cmd = [
      sys.executable,
      "-m",
      "launch.simulate",
      "--config=configs/simulate.py",
      *overrides,
  ]
  return subprocess.run(
      cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )


def write_target(
    path,
    rng,
    *,
    num_layers=2,
    num_heads=2,
    d=4,
    k=3,
    kv=5,
    d_out=3,
    residual=0,
    looped=False,
):
  lp = 1 if looped else num_layers
  w = dict(
      wq=rng.standard_normal((lp, num_heads, d, k)) / 2,
      wk=rng.standard_normal((lp, num_heads, d, k)) / 2,
      wv=rng.standard_normal((lp, num_heads, d, kv)) / 2,
      wo=rng.standard_normal((lp, num_heads, kv, d)) / 3,
      wu=rng.standard_normal((d, d_out)),
  )
  for key in ("wq", "wk", "wv", "wo"):
    w[key] = np.repeat(w[key], num_layers // lp, axis=0)
  np.savez(path, **w, causal=np.array(1), residual=np.array(residual))
  return w


class BringYourOwnTargetTest(parameterized.TestCase):

  def write_files(self, variant):
    """T.npz and X.npy in a new folder: (folder, weights, inputs, residual)."""
    tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(2026)
    residual = int(variant is not None)
    w = write_target(
        os.path.join(tmp, "T.npz"),
        rng,
        residual=residual,
        looped=variant == "looped_residual",
    )
    x = rng.standard_normal((3, 7, 4))
    np.save(os.path.join(tmp, "X.npy"), x)
    return tmp, w, x, residual

  @parameterized.parameters(
      ("sparse", True, 1e-9, None, None),
      ("random", True, 1e-9, None, None),
      ("sparse", False, None, 1e-4, None),
      ("sparse", True, 1e-9, None, "looped_residual"),
      ("random", True, 1e-9, None, "residual"),
  )
  def test_output_matches_independent_target(
      self, ut, x64, atol, rtol, variant
  ):
    tmp, w, x, residual = self.write_files(variant)
    out = os.path.join(tmp, "Y.npy")
    y, report = simulate_target(
        target=f"{tmp}/T.npz", inputs=f"{tmp}/X.npy", out=out, ut=ut, x64=x64
    )
    np.testing.assert_array_equal(np.load(out), y)
    self.check_output(tmp, w, x, residual, ut, x64, atol, rtol)

  @pytest.mark.slow
  def test_command_output_matches_independent_target(self):
    tmp, w, x, residual = self.write_files(None)
    proc = run_simulate(
        f"--config.target={tmp}/T.npz",
        f"--config.inputs={tmp}/X.npy",
        f"--config.out={tmp}/Y.npy",
        "--config.ut=sparse",
        "--config.x64=False",
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn(f"wrote {tmp}/Y.npy", proc.stdout)
    self.check_output(tmp, w, x, residual, "sparse", False, None, 1e-4)

  def check_output(self, tmp, w, x, residual, ut, x64, atol, rtol):
    """Y.npy and Y.json in tmp against the numpy reference of the target."""
    out = os.path.join(tmp, "Y.npy")
    y = np.load(out)
    want = reference.target_forward(w, x, causal=True, residual=bool(residual))
    self.assertEqual(y.shape, (3, 7, 3))
    self.assertEqual(y.dtype, np.float64 if x64 else np.float32)
    if atol is not None:
      np.testing.assert_allclose(y, want, atol=atol, rtol=0)
    else:
      self.assertLessEqual(np.abs(y - want).max() / np.abs(want).max(), rtol)
    with open(os.path.join(tmp, "Y.json")) as f:
      report = json.load(f)
    for key in (
        "construction",
        "m",
        "N",
        "lower_bound",
        "max_abs_err",
        "max_rel_err",
        "condition_number",
        "compile_seconds",
    ):
      self.assertIn(key, report)
    self.assertEqual(report["construction"], ut)
    self.assertAlmostEqual(
        report["max_abs_err"],
        np.abs(y - want).max(),
        delta=1e-6 if not x64 else 1e-12,
    )
    if ut == "random":
      self.assertEqual(report["m"], report["N"])
      self.assertGreater(report["condition_number"], 1)


class BadInputTest(parameterized.TestCase):
  """Each mistake is one UserError line, raised before Y.npy is written."""

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(0)
    write_target(os.path.join(self.tmp, "T.npz"), rng)
    np.save(os.path.join(self.tmp, "X.npy"), rng.standard_normal((2, 3, 4)))

  def assert_bad(self, pattern, target="T.npz", inputs="X.npy", **fields):
    line = cli_helpers.assert_user_error(
        self,
        pattern,
        simulate_target,
        target=f"{self.tmp}/{target}",
        inputs=f"{self.tmp}/{inputs}",
        out=f"{self.tmp}/Y.npy",
        **fields,
    )
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.npy"))
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.json"))
    return line

  def test_missing_key(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    del w["wk"]
    np.savez(f"{self.tmp}/bad.npz", **w)
    self.assert_bad(r"missing key.*wk", "bad.npz")

  def test_misshapen_key(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    w["wk"] = w["wk"][..., :2]
    np.savez(f"{self.tmp}/bad.npz", **w)
    self.assert_bad(r"'wk' has shape .*expected", "bad.npz")

  def test_input_width_mismatch(self):
    np.save(f"{self.tmp}/Xbad.npy", np.zeros((2, 3, 5)))
    self.assert_bad(r"d=4", inputs="Xbad.npy")

  @parameterized.parameters("weights", "inputs")
  def test_nan(self, where):
    if where == "weights":
      w = dict(np.load(f"{self.tmp}/T.npz"))
      w["wv"][0, 0, 0, 0] = np.nan
      np.savez(f"{self.tmp}/bad.npz", **w)
      self.assert_bad(r"NaN/inf", "bad.npz")
    else:
      x = np.load(f"{self.tmp}/X.npy")
      x[0, 0, 0] = np.inf
      np.save(f"{self.tmp}/Xbad.npy", x)
      self.assert_bad(r"NaN/inf", inputs="Xbad.npy")

  def test_nonpositive_size(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    w = {k: (v[:, :0] if v.ndim == 4 else v) for k, v in w.items()}
    np.savez(f"{self.tmp}/bad.npz", **w)
    self.assert_bad(r"H=0 must be a positive", "bad.npz")

  def test_table_grid_nonpositive(self):
    cli_helpers.assert_user_error(
        self,
        r"L=0 must be a positive",
        simulate_grid,
        f"{self.tmp}/table",
        grid=((2, 0, 4),),
    )
    self.assertFalse(os.path.exists(f"{self.tmp}/table"))

  @parameterized.parameters(("num_targets", 0), ("seq_len", 0), ("batch", -1))
  def test_table_size_nonpositive(self, field, value):
    cli_helpers.assert_user_error(
        self,
        rf"config.{field}={value} must be a positive",
        simulate_grid,
        f"{self.tmp}/table",
        **{field: value},
    )
    self.assertFalse(os.path.exists(f"{self.tmp}/table"))

  def test_negative_seed(self):
    self.assert_bad(
        r"seed=-1 must be a non-negative integer", ut="random", seed=-1
    )

  @parameterized.parameters(
      (dict(ut="random", m=0), r"m=0 must be a positive integer"),
      (dict(ut="random", k_u=0), r"k_u=0 is smaller than"),
      (dict(ut="sparse", m=100), r"sparse UT's width is fixed"),
  )
  def test_width_zero_or_for_the_sparse_ut(self, fields, pattern):
    self.assert_bad(pattern, **fields)

  def test_k_u_below_d(self):
    self.assert_bad(r"k_u=3 is smaller than .* d=4", ut="random", k_u=3)

  def test_unknown_construction(self):
    self.assert_bad(r"unknown construction.*random.*sparse", ut="dense")

  def test_existing_output_is_kept(self):
    out = f"{self.tmp}/Y.npy"
    np.save(out, np.arange(3.0))
    before = open(out, "rb").read()
    files = dict(
        target=f"{self.tmp}/T.npz", inputs=f"{self.tmp}/X.npy", out=out
    )
    cli_helpers.assert_user_error(
        self,
        r"Y.npy already exists; pass --config.overwrite=True",
        simulate_target,
        **files,
    )
    self.assertEqual(open(out, "rb").read(), before)
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.json"))
    simulate_target(**files, overwrite=True)
    self.assertEqual(np.load(out).shape, (2, 3, 3))


@pytest.mark.slow
class CommandErrorTest(absltest.TestCase):
  """End to end: exit status, the one `error:` line, no traceback, no output."""

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(0)
    write_target(os.path.join(self.tmp, "T.npz"), rng)
    np.save(os.path.join(self.tmp, "X.npy"), rng.standard_normal((2, 3, 4)))

  def run_files(self, target="T.npz", *extra):
    return run_simulate(
        f"--config.target={self.tmp}/{target}",
        f"--config.inputs={self.tmp}/X.npy",
        f"--config.out={self.tmp}/Y.npy",
        *extra,
    )

  def test_bad_target_file(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    del w["wk"]
    np.savez(f"{self.tmp}/bad.npz", **w)
    cli_helpers.assert_one_line_error(
        self, self.run_files("bad.npz"), r"missing key.*wk"
    )
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.npy"))

  def test_bad_table_override(self):
    proc = run_simulate(
        "--config.grid=((2, 0, 4),)", f"--workdir={self.tmp}/table"
    )
    cli_helpers.assert_one_line_error(self, proc, r"L=0 must be a positive")
    self.assertFalse(os.path.exists(f"{self.tmp}/table"))

  def test_existing_output_is_kept(self):
    out = f"{self.tmp}/Y.npy"
    np.save(out, np.arange(3.0))
    before = open(out, "rb").read()
    cli_helpers.assert_one_line_error(
        self, self.run_files(), r"Y.npy already exists.*overwrite"
    )
    self.assertEqual(open(out, "rb").read(), before)
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.json"))
    proc = self.run_files("T.npz", "--config.overwrite=True")
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(np.load(out).shape, (2, 3, 3))


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
        run_simulate("--gpu_memory_fraction=2"),
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

  def test_one_thread_where_the_step_takes_one_string_at_a_time(self):
    # Zhong & Andreas's Dyck size splits its batch of 1000 into single
    # strings (ut.cpu.host.microbatches); k-hop's step takes its batch whole.
    za = dyck_config.get_config("model=random,variant=res_ln_mlp,max_len=60")
    za.model.update(m=16, num_heads=4, head_width=4, mlp_ratio=4)
    za.train.batch_size = 1000
    self.assertEqual(models.cpu_threads(za), 1)
    khop = khop_config.get_config("model=random,variant=res_ln,k=3")
    self.assertIsNone(models.cpu_threads(khop))
    # An explicit cpu.microbatches counts: whole-batch steps keep every core.
    cpu_config.overlay(za)
    za.cpu.microbatches = "1"
    self.assertIsNone(models.cpu_threads(za))

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

  def test_compiler_options_come_from_the_cpu_section_only(self):
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      no_ynn = dict(
          compiler_options=dict(xla_cpu_experimental_ynn_fusion_type="")
      )
      config = dyck_config.get_config("smoke")
      self.assertEqual(
          implementation.compiler_options(config), {}
      )  # No section.
      cpu_config.overlay(config)
      self.assertEqual(
          implementation.compiler_options(config), {}
      )  # XLA's defaults.
      config.cpu.ynn_fusions = False
      self.assertEqual(implementation.compiler_options(config), no_ynn)
    with mock.patch.object(jax, "default_backend", return_value="gpu"):
      self.assertEqual(implementation.compiler_options(config), {})

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
