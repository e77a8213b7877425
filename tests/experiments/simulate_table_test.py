"""The simulate command's library (ut.experiments.simulate_table) as a user
runs it: bring-your-own target, bad input, and the table.

Most tests call what `launch.simulate` calls (`simulate_table.run_target_file`
and `run_table`, in float64 mode as the command sets it) on a config built
here; the test marked slow runs the command itself (its errors:
tests/launch/simulate_test.py).
"""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import pytest

from configs import simulate as simulate_config
from tests import cli_helpers
from tests import reference
from tests import simulate_helpers
from ut.experiments import simulate_table


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


class BringYourOwnTargetTest(parameterized.TestCase):

  def write_files(self, variant):
    """T.npz and X.npy in a new folder: (folder, weights, inputs, residual)."""
    tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(2026)
    residual = int(variant is not None)
    w = simulate_helpers.write_target(
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
    proc = simulate_helpers.run_simulate(
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
    simulate_helpers.write_target(os.path.join(self.tmp, "T.npz"), rng)
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


class PaddingTest(parameterized.TestCase):
  """Classes that fit one `Padding` share their compiled programs."""

  def test_table_rows_of_one_padding_compile_once(self):
    config = simulate_config.get_config("smoke")
    grid = ((1, 2, 3), (2, 2, 2), (2, 1, 3))
    pads = simulate_table.table_paddings(grid)
    self.assertLen(set(pads), 1)
    jax.clear_caches()
    with jax.enable_x64(True):  # As launch.simulate runs the table.
      for i, ((h, num_layers, d), padding) in enumerate(zip(grid, pads)):
        with simulate_helpers.count_compiles() as compiles:
          row = simulate_table.table_row(h, num_layers, d, config, padding)
        if i:
          self.assertEqual(compiles[0], 0, (h, num_layers, d))
        self.assertLessEqual(row["sparse_f64_abs"], simulate_helpers.F64_ATOL)
        self.assertLessEqual(row["random_f64_abs"], simulate_helpers.F64_ATOL)
        self.assertLessEqual(row["sparse_f32_rel"], simulate_helpers.F32_RTOL)
        self.assertEqual(row["min_exact_m"], row["N"])


if __name__ == "__main__":
  absltest.main()
