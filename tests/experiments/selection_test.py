"""ut.experiments.selection: choosing a cell's hyperparameters, and the report."""

import json
import os

from absl.testing import absltest

from ut.experiments import selection


class ChooseTest(absltest.TestCase):

  def test_most_successes_then_fewest_steps_then_accuracy(self):
    row = lambda lr, succ, med, acc, k=2: dict(
        kind="trained",
        variant="attn",
        width=64,
        data=json.dumps(dict(k=k)),
        lr=lr,
        successes=succ,
        median_steps_to_99=med,
        accuracy_mean=acc,
        seeds=2,
    )
    rows = [
        row(1e-3, 1, 500, 0.999),
        row(3e-4, 2, 4000, 0.995),  # Most successes wins.
        row(3e-3, 2, 9000, 0.999),
        row(1e-3, 0, None, 0.6, k=3),
        row(3e-4, 0, None, 0.7, k=3),  # None succeed: the best accuracy.
        row(3e-3, 0, None, float("nan"), k=3),  # Diverged: last.
    ]
    chosen = {
        json.loads(cell[2])["k"]: (best["lr"], [r["lr"] for r in ranked])
        for cell, best, ranked in selection.choose(rows)
    }
    self.assertEqual(chosen[2], (3e-4, [3e-4, 3e-3, 1e-3]))
    self.assertEqual(chosen[3], (3e-4, [3e-4, 1e-3, 3e-3]))

  def test_report_records_the_chosen_schedule_and_scale(self):
    workdir = self.create_tempdir().full_path
    rows = []
    for name, schedule, successes in (("a", "constant", 1), ("b", "cosine", 2)):
      os.makedirs(os.path.join(workdir, "runs", name))
      config = dict(
          model=dict(embed_scale=0.3),
          train=dict(schedule=schedule, batch_size=16, warmup_steps=1000),
      )
      with open(os.path.join(workdir, "runs", name, "metrics.json"), "w") as f:
        json.dump(dict(config=config), f)
      rows.append(
          dict(
              kind="trained",
              variant="attn",
              width=64,
              data=json.dumps(dict(k=4)),
              lr=1e-3,
              successes=successes,
              median_steps_to_99=1000.0,
              accuracy_mean=0.99,
              seeds=2,
              runs=name,
          )
      )
    selection.report(workdir, rows)
    with open(os.path.join(workdir, "selection.json")) as f:
      (chosen,) = json.load(f)["chosen"]
    self.assertEqual(
        (chosen["schedule"], chosen["embed_scale"], chosen["successes"]),
        ("cosine", 0.3, 2),
    )
    self.assertEqual((chosen["batch_size"], chosen["warmup_steps"]), (16, 1000))
    with open(os.path.join(workdir, "selection.md")) as f:
      columns = [c.strip() for c in f.readline().split("|")]
      self.assertContainsSubset(
          ["schedule", "m", "batch", "warmup", "median strings to 99%"],
          columns,
      )  # m: the width.

  def test_fewer_strings_not_fewer_steps_win_across_batch_sizes(self):
    row = lambda batch, med: dict(
        kind="trained",
        variant="attn",
        width=64,
        data=json.dumps(dict(k=2)),
        lr=1e-3,
        successes=2,
        median_steps_to_99=med,
        accuracy_mean=0.995,
        seeds=2,
        batch_size=batch,
    )
    # 1000 steps at 128 is 128000 strings; 3000 at 32 is 96000.
    ((_, best, ranked),) = selection.choose([row(128, 1000), row(32, 3000)])
    self.assertEqual(best["batch_size"], 32)
    self.assertEqual([r["batch_size"] for r in ranked], [32, 128])


if __name__ == "__main__":
  absltest.main()
