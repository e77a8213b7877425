"""The reports a sweep config names (ut/experiments/figures.py)."""

import json
import math
import os

from absl.testing import absltest
import numpy as np

from configs import dyck_table
from configs import machines
from configs import width
from ut.errors import UserError
from ut.experiments import figures


def _finished_row(k, m):
  """An aggregate row of 3 k-hop runs at 99% (what `width.report` reads)."""
  return dict(
      data=json.dumps(dict(k=k, length=32, alphabet=4)),
      width=m,
      lr=0.01,
      accuracy_mean=0.995,
      accuracy_std=0.0,
      test_mean=0.99,
      test_std=0.0,
      successes=3,
      seeds=3,
  )


class WidthReportTest(absltest.TestCase):

  def test_report_writes_points_and_figure(self):
    workdir = self.create_tempdir().full_path
    rows = [
        dict(
            data=json.dumps(dict(k=1, length=32, alphabet=4)),
            width=w,
            lr=0.01,
            accuracy_mean=a,
            accuracy_std=0.01,
            test_mean=t,
            test_std=0.02,
            successes=s,
            seeds=3,
        )
        # sweep.aggregate gives NaN where the runs have no test accuracy.
        for w, a, t, s in ((100, 0.5, math.nan, 0), (800, 0.995, 0.991, 3))
    ]
    figures.width(
        workdir, rows, cost="Training: 1.0 core-hours.", config=width
    )
    with open(os.path.join(workdir, "width.json")) as f:
      points = json.load(f)["points"]
    self.assertEqual([p["ratio"] for p in points], [100 / 800, 1.0])
    self.assertEqual([p["cell"] for p in points], ["khop1", "khop1"])
    # The test accuracy where the runs have one.
    self.assertEqual([p["accuracy_mean"] for p in points], [0.5, 0.991])
    self.assertEqual([p["held_out"] for p in points], ["validation", "test"])
    with open(os.path.join(workdir, "width.md")) as f:
      lines = f.read().splitlines()
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    self.assertEqual(
        cells,
        ["khop1", "800", "800", "1", "0.01", "test", "99.10 ± 2.00", "3/3"],
    )
    self.assertEqual(lines[-1], "Training: 1.0 core-hours.")
    self.assertGreater(os.path.getsize(os.path.join(workdir, "width.png")), 0)

  def test_report_names_runs_copied_from_another_sweep(self):
    workdir = self.create_tempdir().full_path
    for name, extra in (
        ("a", dict(reused_from="results/dyck/runs/x")),
        ("b", dict(reused_from="results/dyck/runs/y")),
        ("c", {}),
    ):
      os.makedirs(os.path.join(workdir, "runs", name))
      with open(os.path.join(workdir, "runs", name, "metrics.json"), "w") as f:
        json.dump(dict(name=name, **extra), f)
    rows = [_finished_row(k=1, m=800)]
    figures.width(
        workdir, rows, cost="Training: 1.0 core-hours.", config=width
    )
    with open(os.path.join(workdir, "width.md")) as f:
      last = f.read().splitlines()[-1]
    self.assertStartsWith(last, "2 runs are copies")
    self.assertIn(" in results/dyck/runs (", last)
    os.remove(os.path.join(workdir, "runs", "a", "metrics.json"))
    os.remove(os.path.join(workdir, "runs", "b", "metrics.json"))
    figures.width(
        workdir, rows, cost="Training: 1.0 core-hours.", config=width
    )
    with open(os.path.join(workdir, "width.md")) as f:
      self.assertEqual(f.read().splitlines()[-1], "Training: 1.0 core-hours.")

  def test_report_lists_unfinished_runs_with_their_latest_evaluation(self):
    workdir = self.create_tempdir().full_path
    rows = [_finished_row(k=2, m=2528)]
    started = os.path.join(workdir, "runs", "s0")
    os.makedirs(started)
    with open(os.path.join(started, "eval_metrics.csv"), "w") as f:
      f.write("step,accuracy,loss\n500,0.25,1.5\n1000,0.640625,0.75\n")
    with open(os.path.join(started, "config.json"), "w") as f:
      json.dump(dict(train=dict(steps=20000)), f)
    os.makedirs(os.path.join(workdir, "runs", "s1"))  # No evaluation yet.
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[], missing_runs=["s0", "s1", "s2"]), f)
    figures.width(
        workdir, rows, cost="Training: 1.0 core-hours.", config=width
    )
    with open(os.path.join(workdir, "width.md")) as f:
      last = f.read().splitlines()[-1]
    self.assertStartsWith(last, "Not finished, so not in the table (3 runs;")
    self.assertIn(
        "s0: step 1000 of 20000, 64.06% on validation; s1: not started; "
        "s2: not started.",
        last,
    )
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[], missing_runs=["s0"]), f)
    figures.width(
        workdir, rows, cost="Training: 1.0 core-hours.", config=width
    )
    with open(os.path.join(workdir, "width.md")) as f:
      last = f.read().splitlines()[-1]
    self.assertStartsWith(
        last, "Not finished, so not in the table (1 run; its latest"
    )
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[], missing_runs=[]), f)
    figures.width(
        workdir, rows, cost="Training: 1.0 core-hours.", config=width
    )
    with open(os.path.join(workdir, "width.md")) as f:
      self.assertEqual(f.read().splitlines()[-1], "Training: 1.0 core-hours.")


class MachinesReportTest(absltest.TestCase):

  def test_spread(self):
    results = [
        dict(config=dict(model=dict(ut_seed=u)), eval_accuracy=a)
        for u, a in ((0, 0.9), (0, 0.8), (1, 0.5), (1, 0.7))
    ]
    got = figures.spread(results)
    self.assertAlmostEqual(got["mean"], 0.725)
    self.assertAlmostEqual(
        got["between_machines"], abs(0.85 - 0.6) / np.sqrt(2)
    )
    self.assertAlmostEqual(
        got["between_programs"], (0.1 / np.sqrt(2) + 0.2 / np.sqrt(2)) / 2
    )


class WriteTest(absltest.TestCase):

  def test_configs_name_their_reports(self):
    for module, name in (
        (width, "width"),
        (machines, "machines"),
        (dyck_table, "dyck_breakdown"),
    ):
      self.assertIn(module.REPORT, figures.REPORTS)
      self.assertEqual(module.REPORT, name)

  def test_an_unknown_report_is_a_user_error(self):
    module = type("Config", (), dict(REPORT="nope"))
    with self.assertRaisesRegex(UserError, "REPORT = 'nope'; use one of"):
      figures.write(module, self.create_tempdir().full_path, [])


if __name__ == "__main__":
  absltest.main()
