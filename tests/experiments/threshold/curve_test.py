"""The threshold experiment (ut.experiments.threshold.curve): a sharp threshold
at N in every row, its outputs, and the paddings it compiles once."""

import csv
import json
import math
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from configs import threshold as threshold_config
from tests import cli_helpers
from tests import simulate_helpers
from ut.core import bounds
from ut.core import simulate
from ut.experiments import threshold

EXACT = 1e-6  # Issue: float64 relative error at m >= N.
INEXACT = 1e-3  # Issue: relative error at m = N - 1, for every target.


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
        with simulate_helpers.count_compiles() as compiles:
          rows = threshold.sweep_row(h, num_layers, d, config, padding)
        if i:
          self.assertEqual(compiles[0], 0, (h, num_layers, d))
        n = bounds.random_threshold(h, num_layers, d)
        for r in rows:
          if r["m"] >= n:
            self.assertLess(r["max_rel_err"], EXACT, (h, num_layers, d, r))


if __name__ == "__main__":
  absltest.main()
