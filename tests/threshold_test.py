"""The threshold experiment: sharp at m = N, outputs written, nothing overwritten."""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import pytest

from configs import threshold as threshold_config
from tests import cli_helpers
from tests import simulate_test
from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import simulate
from ut.core import targets as targets_lib
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.experiments import threshold

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXACT = 1e-6  # Issue: float64 relative error at m >= N.
INEXACT = 1e-3  # Issue: relative error at m = N - 1, for every target.


def run_threshold(workdir, *overrides):
  cmd = [
      sys.executable,
      "-m",
      "launch.threshold",
      "--config=configs/threshold.py:smoke",
      f"--workdir={workdir}",
      *overrides,
  ]
  return subprocess.run(
      cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )


def run_in_process(workdir, **fields):
  """What launch.threshold does, in this process (float64, as the command)."""
  config = threshold_config.get_config("smoke")
  config.update(fields)
  with jax.enable_x64(True):
    return threshold.run(config, workdir)


class RunTest(absltest.TestCase):
  """One smoke run of the experiment; its outputs are checked, then kept."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = tempfile.mkdtemp()
    run_in_process(cls.workdir)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.workdir)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    with open(os.path.join(self.workdir, "threshold.json")) as f:
      self.report = json.load(f)

  def test_sharp_threshold_in_every_row(self):
    config = threshold_config.get_config("smoke")
    rows = self.report["rows"]
    for h, num_layers, d in config.grid:
      n = bounds.random_threshold(h, num_layers, d)
      mine = {
          r["m"]: r
          for r in rows
          if (r["H"], r["L"], r["d"]) == (h, num_layers, d)
      }
      self.assertContainsSubset({n - 1, n, math.ceil(1.25 * n)}, set(mine))
      for m, r in mine.items():
        self.assertEqual(r["N"], n)
        if m >= n:
          self.assertLess(r["max_rel_err"], EXACT, (h, num_layers, d, m))
      self.assertGreater(
          mine[n - 1]["min_rel_err"], INEXACT, (h, num_layers, d)
      )
      if bounds.lower_bound(h, num_layers) >= 1:
        self.assertIn(math.ceil(bounds.lower_bound(h, num_layers)), mine)

  def test_outputs_and_provenance(self):
    with open(os.path.join(self.workdir, "threshold.csv")) as f:
      csv_rows = list(csv.DictReader(f))
    self.assertLen(csv_rows, len(self.report["rows"]))
    self.assertAlmostEqual(
        float(csv_rows[0]["max_rel_err"]), self.report["rows"][0]["max_rel_err"]
    )
    with open(os.path.join(self.workdir, "threshold.png"), "rb") as f:
      png = f.read()
    self.assertTrue(png.startswith(b"\x89PNG"))
    self.assertGreater(len(png), 10_000)
    self.assertLen(
        self.report["summary"], len(threshold_config.get_config("smoke").grid)
    )
    self.assertGreater(self.report["wall_seconds"], 0)
    self.assertEqual(self.report["seed"], 0)
    prov = self.report["provenance"]
    self.assertIn("git_commit", prov)
    self.assertEqual(
        prov["config"]["num_targets"],
        threshold_config.get_config("smoke").num_targets,
    )
    self.assertFalse(
        [p for p in os.listdir(self.workdir) if p.endswith(".tmp")]
    )

  def test_refuses_to_overwrite(self):
    path = os.path.join(self.workdir, "threshold.json")
    before = open(path, "rb").read()
    cli_helpers.assert_user_error(
        self,
        r"threshold.csv already exists.*overwrite",
        run_in_process,
        self.workdir,
    )
    self.assertEqual(open(path, "rb").read(), before)


@pytest.mark.slow
class CommandTest(absltest.TestCase):
  """The command end to end: its table, its files, and no overwriting."""

  def test_prints_the_table_writes_files_and_keeps_them(self):
    workdir = self.create_tempdir().full_path
    proc = run_threshold(workdir)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("N-1", proc.stdout)
    self.assertIn(f"wrote {workdir}/threshold.csv, .json and .png", proc.stdout)
    with open(os.path.join(workdir, "threshold.json")) as f:
      report = json.load(f)
    self.assertLen(
        report["summary"], len(threshold_config.get_config("smoke").grid)
    )
    self.assertTrue(os.path.exists(os.path.join(workdir, "threshold.png")))
    before = open(os.path.join(workdir, "threshold.json"), "rb").read()
    cli_helpers.assert_one_line_error(
        self, run_threshold(workdir), r"threshold.csv already exists.*overwrite"
    )
    self.assertEqual(
        open(os.path.join(workdir, "threshold.json"), "rb").read(), before
    )

  def test_bad_override_is_one_line_error(self):
    workdir = self.create_tempdir().full_path
    cli_helpers.assert_one_line_error(
        self,
        run_threshold(workdir, "--config.grid=(1, 2, 4)"),
        r"grid entry 1 must be",
    )
    self.assertEmpty(os.listdir(workdir))


class BadInputTest(parameterized.TestCase):

  @parameterized.parameters(
      (dict(grid=((2, 0, 4),)), r"L=0 must be a positive"),
      (dict(grid=((2, 2),)), r"must be \(H, L, d\)"),
      (dict(grid=(1, 2, 4)), r"grid entry 1 must be"),
      (dict(grid=()), r"grid is empty"),
      (dict(seed=-1), r"config.seed=-1 must be a " r"non-negative integer"),
      (dict(ratios=(0.5, -1.0)), r"ratios=.*positive"),
  )
  def test_one_line_error(self, fields, pattern):
    workdir = self.create_tempdir().full_path
    cli_helpers.assert_user_error(
        self, pattern, run_in_process, workdir, **fields
    )
    self.assertEmpty(os.listdir(workdir))


class LibraryTest(parameterized.TestCase):

  @parameterized.parameters((1, 2, 4, 0.5), (2, 2, 4, 2.0), (3, 2, 2, 4.5))
  def test_widths(self, h, num_layers, d, lower):
    n = bounds.random_threshold(h, num_layers, d)
    ms = threshold.widths(h, num_layers, d, (0.5, 1.25))
    want = {math.ceil(0.5 * n), n - 1, n, math.ceil(1.25 * n)}
    if lower >= 1:
      want.add(math.ceil(lower))
    self.assertEqual(ms, sorted(want))

  def test_padding_keeps_the_errors(self):
    gens = threshold.random_targets(2, 2, 2, num=2, seed=3)
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 2))
    padding = simulate.Padding(num_layers=3, num_heads=3, width=3, ut_width=40)
    for m in (20, 32):  # Below and at N = 32.
      plain = threshold.point(gens, x, m, seed=1)
      padded = threshold.point(gens, x, m, seed=1, padding=padding)
      np.testing.assert_allclose(
          padded["rel_errs"], plain["rel_errs"], rtol=1e-6, atol=1e-13
      )

  def test_classes_of_one_padding_compile_once(self):
    config = threshold_config.get_config("smoke")
    pads = threshold.sweep_paddings(config.grid, config.ratios)
    self.assertLen(set(pads), 1)
    jax.clear_caches()
    with jax.enable_x64(True):  # As launch.threshold runs the sweep.
      for i, ((h, num_layers, d), padding) in enumerate(zip(config.grid, pads)):
        with simulate_test.count_compiles() as compiles:
          rows = threshold.sweep_row(h, num_layers, d, config, padding)
        if i:
          self.assertEqual(compiles[0], 0, (h, num_layers, d))
        n = bounds.random_threshold(h, num_layers, d)
        for r in rows:
          if r["m"] >= n:
            self.assertLess(r["max_rel_err"], EXACT, (h, num_layers, d, r))

  def test_attention_maps_match_the_target(self):
    h, num_layers, d = 2, 2, 3
    with jax.enable_x64(True):
      target = threshold.random_targets(h, num_layers, d, num=1, seed=5)[0]
      x = np.random.default_rng(1).standard_normal((2, 6, d))
      want = threshold.attention_maps(
          threshold.target_params(target), x, num_layers=num_layers, causal=True
      )
      self.assertEqual(want.shape, (num_layers, 2, h, 6, 6))
      np.testing.assert_allclose(want.sum(-1), 1.0, atol=1e-12)
      self.assertEqual(np.abs(np.triu(want, 1)).max(), 0.0)
      sparse_ut = sparse.make_sparse_ut(h, num_layers, d)
      program, _ = compile_lib.compile_sparse(sparse_ut, target)
      n = bounds.random_threshold(h, num_layers, d)
      got = {
          "sparse": dict(
              sparse.to_dense(sparse_ut, np.float64), embed=program["embed"]
          )
      }
      for m in (n, n - 1):
        ut = gaussian.make_gaussian_ut(h, num_layers, m, d, seed=2)
        with warnings.catch_warnings(record=True) as caught:
          warnings.simplefilter("always")
          program, _ = compile_lib.compile_random(ut, target)
        self.assertEqual(bool(caught), m < n)  # Below N the fit is inexact.
        got[m] = dict(ut, embed=program["embed"])
      maps = {
          k: threshold.attention_maps(p, x, num_layers=num_layers, causal=True)
          for k, p in got.items()
      }
    np.testing.assert_allclose(maps["sparse"], want, atol=1e-12)
    np.testing.assert_allclose(maps[n], want, atol=1e-9)
    self.assertGreater(np.abs(maps[n - 1] - want).max(), INEXACT)

  def test_attention_comparison_of_a_residual_target_uses_its_n(self):
    n = bounds.random_threshold(2, 2, 3, residual=True)
    self.assertGreater(n, bounds.random_threshold(2, 2, 3))
    with jax.enable_x64(True):
      target = targets_lib.init(
          jax.random.PRNGKey(4),
          num_heads=2,
          num_layers=2,
          width=3,
          looped=True,
          residual=True,
          dtype=jax.numpy.float64,
      )
      x = np.random.default_rng(0).standard_normal((1, 5, 3))
      maps = threshold.attention_comparison(target, x)
    [at_n] = [k for k in maps if f"m={n} " in k]
    self.assertIn(f"N={n}", at_n)
    np.testing.assert_allclose(maps[at_n], maps["target"], atol=1e-9)

  def test_attention_comparison_and_plot(self):
    with jax.enable_x64(True):
      target = threshold.random_targets(2, 2, 2, num=1, seed=0)[0]
      x = np.random.default_rng(0).standard_normal((1, 4, 2))
      maps = threshold.attention_comparison(target, x)
    self.assertLen(maps, 4)  # Target, sparse, random at N and N - 1.
    self.assertEqual(list(maps)[0], "target")
    path = os.path.join(self.create_tempdir().full_path, "attention.png")
    threshold.plot_attention(maps, layer=2, head=2, path=path)
    with open(path, "rb") as f:
      self.assertTrue(f.read().startswith(b"\x89PNG"))
    with self.assertRaisesRegex(ValueError, r"layers 1..2 and heads 1..2"):
      threshold.plot_attention(maps, layer=3, head=1)


if __name__ == "__main__":
  absltest.main()
