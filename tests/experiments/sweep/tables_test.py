"""ut.experiments.sweep.tables: the aggregate rows, their cost note, and the
finished rows plots read."""

import json
import os

from absl.testing import absltest
import numpy as np

from tests import sweep_config
from tests import table_rows
from ut.experiments import sweep
from ut.io import notebooks
from ut.io import reports

ROOT = notebooks.ROOT


class SweepTest(absltest.TestCase):

  def test_table_counts_each_rows_training_time(self):
    workdir = self.create_tempdir().full_path
    runs = sweep.collect_runs(sweep_config, "sparse")[:2]
    logged, grouped = (n for n, _ in runs)
    for (name, config), seconds in zip(runs, (None, 90.0)):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              name=name,
              eval_accuracy=0.5,
              task="dyck",
              kind="sparse",
              variant="res_ln_mlp",
              run_seconds=seconds,
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    # A single run logs its step rate: 100 steps at 10/s, 200 at 4/s: 60 s.
    with open(
        os.path.join(workdir, "runs", logged, "train_metrics.csv"), "w"
    ) as f:
      f.write("step,loss,steps_per_sec\n100,1.0,10\n300,0.5,4\n")
    [row] = sweep.aggregate(workdir, [logged, grouped])
    # The vmapped group's run has no log: its share of the group, 90 s.
    self.assertAlmostEqual(row["core_minutes"], (60 + 90) / 60)
    self.assertEqual(row["trained_runs"], 2)
    compiled = dict(row, seeds=3, trained_runs=0, core_minutes=0.0)
    self.assertEqual(row["accelerator_runs"], 0)
    self.assertEqual(
        sweep.cost_note([dict(row, core_minutes=90.0), compiled], 150.4)[:65],
        "Training: 1.5 core-hours over 2 runs trained on the CPU (each run",
    )
    self.assertIn(
        "matmul when this table was written: 150 GFLOP/s",
        sweep.cost_note([row], 150.4),
    )
    self.assertNotIn("wall time", sweep.cost_note([row], 150.4))
    # A run trained on an accelerator counts apart, in wall minutes.
    path = os.path.join(workdir, "runs", grouped, "metrics.json")
    with open(path) as f:
      metrics = json.load(f)
    reports.write_json(
        path, dict(metrics, provenance=dict(device="NVIDIA H200"))
    )
    [row] = sweep.aggregate(workdir, [logged, grouped])
    self.assertAlmostEqual(row["core_minutes"], 1.0)
    self.assertAlmostEqual(row["accelerator_minutes"], 1.5)
    self.assertEqual(
        (row["accelerator_runs"], row["accelerators"]), (1, "NVIDIA H200")
    )
    note = sweep.cost_note([row], 150.4)
    self.assertIn("0.0 core-hours over 1 runs trained on the CPU", note)
    self.assertIn("1 run trained on NVIDIA H200: 2 minutes of training", note)
    self.assertNotIn("resumed", note)
    note = sweep.cost_note([dict(row, resumed_runs=2)], 150.4)
    self.assertIn("2 runs of resumed vmapped groups count only their", note)

  def test_table_shows_test_at_best_valid_where_every_run_has_it(self):
    workdir = self.create_tempdir().full_path
    runs = sweep.collect_runs(sweep_config, "sparse")[:2]
    best = (0.5, 0.75)
    for (name, config), b in zip(runs, best):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              name=name,
              eval_accuracy=0.25,
              test_accuracy=0.25,
              test_at_best_valid=dict(
                  step=4, valid_accuracy=0.9, test_accuracy=b
              ),
              task="dyck",
              kind="sparse",
              variant="res_ln_mlp",
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    names = [n for n, _ in runs]
    [row] = sweep.aggregate(workdir, names)
    self.assertAlmostEqual(row["test_best_mean"], np.mean(best))
    self.assertAlmostEqual(row["test_best_std"], np.std(best, ddof=1))
    table = sweep.markdown_table([row, dict(row, test_best_mean=0.0)])
    self.assertIn("test at best valid", table.splitlines()[0])
    self.assertIn(reports.mean_std(np.mean(best), np.std(best, ddof=1)), table)
    # One run without it: the cell has no such score, and the table no column.
    path = os.path.join(workdir, "runs", names[1], "metrics.json")
    with open(path) as f:
      metrics = json.load(f)
    del metrics["test_at_best_valid"]
    reports.write_json(path, metrics)
    [row] = sweep.aggregate(workdir, names)
    self.assertNotIn("test_best_mean", row)
    self.assertNotIn("test at best valid", sweep.markdown_table([row]))


class PlotsTest(absltest.TestCase):

  def test_finished_rows(self):
    workdir = self.create_tempdir().full_path
    config = (
        os.path.join(ROOT, "configs/dyck_table.py")
        + ":smoke,kinds=sparse,variants=attn,mixes=za,seeds=2"
    )
    self.assertIsNone(sweep.finished_rows(config, workdir))
    runs = "model=sparse_variant=attn_mix=za_seed={}_smoke"
    row = dict(
        table_rows.ROWS[0], runs=";".join(runs.format(s) for s in range(2))
    )
    other = dict(table_rows.ROWS[1], runs="not_in_this_grid")
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[row, other]), f)
    self.assertEqual(sweep.finished_rows(config, workdir), [row])
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[dict(row, runs=runs.format(0))]), f)
    self.assertIsNone(sweep.finished_rows(config, workdir))  # Seed 1 missing.

  def test_finished_rows_of_fewer_seeds_than_the_table(self):
    # The table has 3 seeds per cell; a 2-seed sub-grid gets its own mean.
    workdir = self.create_tempdir().full_path
    grid = (
        os.path.join(ROOT, "configs/dyck_table.py")
        + ":smoke,kinds=sparse,variants=attn,mixes=za,seeds={}"
        + ",more_seeds=0"  # Seeds this far apart would get more runs.
    )
    module = sweep.load_config_module(grid)
    runs = sweep.collect_runs(module, grid.format(3).split(":", 1)[1])
    for (name, config), acc in zip(runs, (0.5, 0.7, 0.9)):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              name=name,
              eval_accuracy=acc,
              task="dyck",
              kind="sparse",
              variant="attn",
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    sweep.write_table(
        workdir, sweep.aggregate(workdir, [n for n, _ in runs]), {}
    )
    [row] = sweep.finished_rows(grid.format(2), workdir)
    self.assertEqual(row["seeds"], 2)
    self.assertAlmostEqual(row["accuracy_mean"], 0.6)
    self.assertAlmostEqual(row["accuracy_std"], np.std([0.5, 0.7], ddof=1))
    [row] = sweep.finished_rows(grid.format(3), workdir)
    self.assertAlmostEqual(row["accuracy_mean"], 0.7)


if __name__ == "__main__":
  absltest.main()
