"""The simulate command as a user runs it: bring-your-own target, and bad input."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from tests import cli_helpers
from tests import reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_simulate(*overrides):
  cmd = [sys.executable, "-m", "launch.simulate", "--config=configs/simulate.py",
         *overrides]
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                        timeout=300, check=False)


def write_target(path, rng, *, num_layers=2, num_heads=2, d=4, k=3, kv=5,
                 d_out=3, residual=0, looped=False):
  lp = 1 if looped else num_layers
  w = dict(wq=rng.standard_normal((lp, num_heads, d, k)) / 2,
           wk=rng.standard_normal((lp, num_heads, d, k)) / 2,
           wv=rng.standard_normal((lp, num_heads, d, kv)) / 2,
           wo=rng.standard_normal((lp, num_heads, kv, d)) / 3,
           wu=rng.standard_normal((d, d_out)))
  for key in ("wq", "wk", "wv", "wo"):
    w[key] = np.repeat(w[key], num_layers // lp, axis=0)
  np.savez(path, **w, causal=np.array(1), residual=np.array(residual))
  return w


class BringYourOwnTargetTest(parameterized.TestCase):

  @parameterized.parameters(("sparse", True, 1e-9, None, None),
                            ("random", True, 1e-9, None, None),
                            ("sparse", False, None, 1e-4, None),
                            ("sparse", True, 1e-9, None, "looped_residual"),
                            ("random", True, 1e-9, None, "residual"))
  def test_output_matches_independent_target(self, ut, x64, atol, rtol, variant):
    tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(2026)
    residual = int(variant is not None)
    w = write_target(os.path.join(tmp, "T.npz"), rng, residual=residual,
                     looped=variant == "looped_residual")
    x = rng.standard_normal((3, 7, 4))
    np.save(os.path.join(tmp, "X.npy"), x)
    out = os.path.join(tmp, "Y.npy")
    proc = run_simulate(f"--config.target={tmp}/T.npz",
                        f"--config.inputs={tmp}/X.npy", f"--config.out={out}",
                        f"--config.ut={ut}", f"--config.x64={x64}")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
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
    for key in ("construction", "m", "N", "lower_bound", "max_abs_err",
                "max_rel_err", "condition_number", "compile_seconds"):
      self.assertIn(key, report)
    self.assertEqual(report["construction"], ut)
    self.assertAlmostEqual(report["max_abs_err"], np.abs(y - want).max(),
                           delta=1e-6 if not x64 else 1e-12)
    if ut == "random":
      self.assertEqual(report["m"], report["N"])
      self.assertGreater(report["condition_number"], 1)


class BadInputTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(0)
    write_target(os.path.join(self.tmp, "T.npz"), rng)
    np.save(os.path.join(self.tmp, "X.npy"), rng.standard_normal((2, 3, 4)))

  def run_bad(self, target="T.npz", inputs="X.npy", *extra):
    return run_simulate(f"--config.target={self.tmp}/{target}",
                        f"--config.inputs={self.tmp}/{inputs}",
                        f"--config.out={self.tmp}/Y.npy", *extra)

  def assert_one_line_error(self, proc, pattern):
    line = cli_helpers.assert_one_line_error(self, proc, pattern)
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.npy"))
    return line

  def test_missing_key(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    del w["wk"]
    np.savez(f"{self.tmp}/bad.npz", **w)
    self.assert_one_line_error(self.run_bad("bad.npz"), r"missing key.*wk")

  def test_misshapen_key(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    w["wk"] = w["wk"][..., :2]
    np.savez(f"{self.tmp}/bad.npz", **w)
    self.assert_one_line_error(self.run_bad("bad.npz"), r"'wk' has shape .*expected")

  def test_input_width_mismatch(self):
    np.save(f"{self.tmp}/Xbad.npy", np.zeros((2, 3, 5)))
    self.assert_one_line_error(self.run_bad(inputs="Xbad.npy"), r"d=4")

  @parameterized.parameters("weights", "inputs")
  def test_nan(self, where):
    if where == "weights":
      w = dict(np.load(f"{self.tmp}/T.npz"))
      w["wv"][0, 0, 0, 0] = np.nan
      np.savez(f"{self.tmp}/bad.npz", **w)
      proc = self.run_bad("bad.npz")
    else:
      x = np.load(f"{self.tmp}/X.npy")
      x[0, 0, 0] = np.inf
      np.save(f"{self.tmp}/Xbad.npy", x)
      proc = self.run_bad(inputs="Xbad.npy")
    self.assert_one_line_error(proc, r"NaN/inf")

  def test_nonpositive_size(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    w = {k: (v[:, :0] if v.ndim == 4 else v) for k, v in w.items()}
    np.savez(f"{self.tmp}/bad.npz", **w)
    self.assert_one_line_error(self.run_bad("bad.npz"), r"H=0 must be a positive")

  def test_table_grid_nonpositive(self):
    proc = run_simulate("--config.grid=((2, 0, 4),)",
                        f"--workdir={self.tmp}/table")
    self.assert_one_line_error(proc, r"L=0 must be a positive")

  @parameterized.parameters(("num_targets", 0), ("seq_len", 0), ("batch", -1))
  def test_table_size_nonpositive(self, field, value):
    proc = run_simulate(f"--config.{field}={value}", f"--workdir={self.tmp}/table")
    self.assert_one_line_error(proc, rf"config.{field}={value} must be a positive")
    self.assertFalse(os.path.exists(f"{self.tmp}/table"))

  def test_negative_seed(self):
    self.assert_one_line_error(
        self.run_bad("T.npz", "X.npy", "--config.ut=random", "--config.seed=-1"),
        r"seed=-1 must be a non-negative integer")
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.npy"))

  @parameterized.parameters(
      (("--config.ut=random", "--config.m=0"), r"m=0 must be a positive integer"),
      (("--config.ut=random", "--config.k_u=0"), r"k_u=0 is smaller than"),
      (("--config.ut=sparse", "--config.m=100"), r"sparse UT's width is fixed"))
  def test_width_zero_or_for_the_sparse_ut(self, flags, pattern):
    self.assert_one_line_error(self.run_bad("T.npz", "X.npy", *flags), pattern)
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.npy"))

  def test_k_u_below_d(self):
    self.assert_one_line_error(
        self.run_bad("T.npz", "X.npy", "--config.ut=random", "--config.k_u=3"),
        r"k_u=3 is smaller than .* d=4")

  def test_unknown_construction(self):
    self.assert_one_line_error(self.run_bad("T.npz", "X.npy", "--config.ut=dense"),
                               r"unknown construction.*random.*sparse")

  def test_existing_output_is_kept(self):
    out = f"{self.tmp}/Y.npy"
    np.save(out, np.arange(3.0))
    before = open(out, "rb").read()
    proc = self.run_bad()
    self.assertNotEqual(proc.returncode, 0)
    self.assertNotIn("Traceback", proc.stderr)
    self.assertRegex(proc.stderr, r"error: .*Y.npy already exists.*overwrite")
    self.assertEqual(open(out, "rb").read(), before)
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.json"))
    proc = self.run_bad("T.npz", "X.npy", "--config.overwrite=True")
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(np.load(out).shape, (2, 3, 3))


if __name__ == "__main__":
  absltest.main()
