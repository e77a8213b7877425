"""ut.experiments.budget.cells: a run's value at a budget, and a cell's seeds."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from tests import budget_helpers
from tests import cli_helpers
from ut.experiments import budget


class ValueAtTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.sweep = self.create_tempdir().full_path
    budget_helpers.write_run(
        self.sweep, 0, [0.3, 0.5, 0.7], steps=10
    )  # Still running.
    budget_helpers.write_run(
        self.sweep, 1, [0.4, 0.996], steps=10, stop=budget_helpers.SUCCESS_STOP
    )
    budget_helpers.write_run(
        self.sweep, 2, [0.2, 0.6], steps=10, stop=budget_helpers.PLATEAU_STOP
    )
    budget_helpers.write_run(
        self.sweep, 3, [0.1, 0.8]
    )  # Ended at its cap, 20 strings.
    self.runs = {r["config"]["seed"]: r for r in budget.read_runs(self.sweep)}

  @parameterized.parameters((10, 0.3), (19, 0.3), (20, 0.5), (29, 0.5))
  def test_last_evaluation_at_or_before_the_budget(self, strings, want):
    self.assertEqual(budget.value_at(self.runs[0], strings), (want, "reached"))

  def test_no_evaluation_before_the_first(self):
    self.assertEqual(budget.value_at(self.runs[0], 9), (None, "no eval"))

  @parameterized.parameters((1, "success", 0.996), (2, "plateau", 0.6))
  def test_an_early_stop_carries_its_last_value(self, seed, flag, want):
    self.assertEqual(budget.value_at(self.runs[seed], 1000), (want, flag))
    self.assertEqual(
        budget.value_at(self.runs[seed], 1000, carry=()), (None, flag)
    )

  def test_a_capped_run_counts_nothing_after_its_cap(self):
    self.assertEqual(budget.value_at(self.runs[3], 20), (0.8, "reached"))
    self.assertEqual(budget.value_at(self.runs[3], 21), (None, "capped"))

  def test_a_run_that_has_not_trained_that_far_counts_nothing(self):
    self.assertEqual(budget.value_at(self.runs[0], 31), (None, "capped"))


class CellTest(parameterized.TestCase):

  def test_mean_std_min_and_successes(self):
    sweep = self.create_tempdir().full_path
    finals = [0.98, 0.99, 0.999, 0.5]
    for seed, a in enumerate(finals):
      budget_helpers.write_run(sweep, seed, [0.1, a], steps=5)
    c = budget.cell(budget.read_runs(sweep), 20)
    self.assertEqual((c["n"], c["seeds"]), (4, 4))
    self.assertAlmostEqual(c["mean"], np.mean(finals))
    self.assertAlmostEqual(c["std"], np.std(finals, ddof=1))
    self.assertEqual(c["min"], 0.5)
    self.assertEqual(c["successes"], 2)  # 0.99 and 0.999 are >= 0.99.
    self.assertEqual(budget.cell_text(c).split()[-1], "2/4")

  def test_missing_and_carried_seeds_are_counted_and_marked(self):
    sweep = self.create_tempdir().full_path
    budget_helpers.write_run(sweep, 0, [0.5, 0.9, 0.95])
    budget_helpers.write_run(
        sweep, 1, [0.4, 0.996], steps=3, stop=budget_helpers.SUCCESS_STOP
    )
    budget_helpers.write_run(
        sweep, 2, [0.2, 0.7], steps=2
    )  # Capped before 30 strings.
    c = budget.cell(budget.read_runs(sweep), 30)
    self.assertEqual((c["n"], c["seeds"]), (2, 3))
    self.assertEqual(c["flags"], {"success": 1, "capped": 1})
    self.assertAlmostEqual(c["mean"], (0.95 + 0.996) / 2)
    self.assertEndsWith(budget.cell_text(c), "1/2 of 3 (1†)")

  def test_an_empty_cell_says_why(self):
    sweep = self.create_tempdir().full_path
    for seed in range(3):
      budget_helpers.write_run(sweep, seed, [0.2, 0.7])
    c = budget.cell(budget.read_runs(sweep), 1000)
    self.assertEqual(c["n"], 0)
    self.assertEqual(budget.cell_text(c), "— (3 ended at the cap)")

  def test_rows_are_seeds_of_one_config_and_one_cap(self):
    sweep = self.create_tempdir().full_path
    for seed in range(3):
      budget_helpers.write_run(sweep, seed, [0.2, 0.7])
      budget_helpers.write_run(sweep, seed, [0.2, 0.7, 0.9], steps=5)
    budget_helpers.write_run(sweep, 0, [0.3, 0.8], variant="res_ln")
    rows = budget.group_rows(budget.read_runs(sweep), "k")
    got = [(r["variant"], r["cap"], len(r["runs"])) for r in rows]
    self.assertEqual(got, [("attn", 20, 3), ("attn", 50, 3), ("res_ln", 20, 1)])
    self.assertEqual({r["panel"] for r in rows}, {2})

  def test_compiled_runs_and_folders_without_runs(self):
    sweep = self.create_tempdir().full_path
    cli_helpers.assert_user_error(self, "has no runs", budget.read_runs, sweep)
    budget_helpers.write_run(sweep, 0, [0.5])
    path = os.path.join(sweep, "runs", os.listdir(f"{sweep}/runs")[0])
    with open(f"{path}/metrics.json") as f:
      m = json.load(f)
    m["config"]["compiled"] = "sparse"
    with open(f"{path}/metrics.json", "w") as f:
      json.dump(m, f)
    cli_helpers.assert_user_error(
        self, "no trained run", budget.read_runs, sweep
    )


if __name__ == "__main__":
  absltest.main()
