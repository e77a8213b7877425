"""ut.experiments.sweep.rules: the tables' adaptive rules (more seeds where
seeds disagree, longer runs for rising cells)."""

import json
import math
import os

from absl.testing import absltest

from tests import paths
from ut.experiments import sweep
from ut.experiments.sweep import rules
from ut.io import reports

ROOT = paths.ROOT


class SweepTest(absltest.TestCase):

  def test_dyck_table_adds_seeds_where_seeds_disagree(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )

    def plan(accuracy_of):
      added = []
      add = lambda arg="", **kw: added.append(arg) or arg
      finished = lambda name: (
          None
          if accuracy_of(name) is None
          else {"eval_accuracy": accuracy_of(name)}
      )
      module.sweep(
          add,
          "smoke,mixes=za,compiled=false",
          adapt=rules.adapter(add, finished),
      )
      return added

    base = plan(lambda name: None)
    self.assertLen(base, 15)  # 5 rows x 3 seeds, none recorded yet.
    # The sparse row spreads by 2.5 points, every other row by 1.5.
    spread = lambda name: (
        0.9 + 0.025 * int(name.split("seed=")[1][0]) / 2
        if "model=sparse" in name
        else 0.9 + 0.015 * int(name.split("seed=")[1][0]) / 2
    )
    added = [run for run in plan(spread) if run not in base]
    self.assertEqual(
        added,
        [
            "model=sparse,variant=attn,mix=za,seed=3,smoke",
            "model=sparse,variant=attn,mix=za,seed=4,smoke",
        ],
    )
    # A diverged seed (NaN accuracy) counts as a disagreement.
    diverged = lambda name: (
        math.nan if "trained,variant=attn" in name and "seed=1" in name else 0.9
    )
    self.assertEqual(
        [r for r in plan(diverged) if r not in base],
        [f"model=trained,variant=attn,mix=za,seed={s},smoke" for s in (3, 4)],
    )
    # A row whose seeds are not all recorded gets no more seeds yet.
    partial = lambda name: None if "seed=2" in name else spread(name)
    self.assertEqual([r for r in plan(partial) if r not in base], [])

  def test_khop_table_trains_rising_cells_longer(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    cap = module.get_config("smoke").train.steps

    def recorded(curve_of):
      def finished(name):
        curve = curve_of(name)
        if curve is None:
          return None
        return dict(
            step=curve[-1][0],
            stopped_early=None if curve[-1][0] == cap else "accuracy",
            curve=curve,
            config=dict(train=dict(steps=cap)),
        )

      return finished

    def plan(curve_of):
      added = []
      add = lambda arg="", **kw: added.append((arg, kw)) or arg
      module.sweep(
          add,
          "smoke,ks=2,kinds=sparse+random,variants=attn,compiled=false",
          adapt=rules.adapter(add, recorded(curve_of)),
      )
      return added

    base = plan(lambda name: None)
    self.assertLen(base, 9)  # sparse, random m = 256 and m = 928; 3 seeds.
    # Evaluations at each fifth of the cap; the sparse row's seed 1 gains
    # 2 points over the last fifth, every other run 0.5.
    steps = [cap * i // 5 for i in range(1, 6)]
    curve = lambda gain: [[s, 0.5 + gain * (s == cap)] for s in steps]
    rising = lambda name: curve(
        0.02 if "model=sparse" in name and "seed=1" in name else 0.005
    )
    added = [run for run in plan(rising) if run not in base]
    self.assertEqual(
        added,
        [
            (
                f"model=sparse,variant=attn,k=2,seed={s},smoke",
                {"train.steps": 5 * cap},
            )
            for s in range(3)
        ],
    )
    # A run stopped early (here at 99.5%) is not at its cap: flat or not.
    early = lambda name: [
        [s, 0.5 + 0.02 * (s == steps[-2])] for s in steps[:-1]
    ]
    self.assertEqual([r for r in plan(early) if r not in base], [])
    # A cell with a seed not yet recorded waits.
    partial = lambda name: None if "seed=2" in name else rising(name)
    self.assertEqual([r for r in plan(partial) if r not in base], [])
    # Through the sweep: from recorded metrics, runs of their own (a new
    # name, the cap times `longer`); none with longer=1.
    workdir = self.create_tempdir().full_path
    grid = "smoke,ks=2,kinds=sparse,variants=attn,compiled=false,longer={}"
    for name, config in sweep.collect_runs(module, grid.format(3)):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              recorded(rising)(name),
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    runs = sweep.collect_runs(module, grid.format(3), workdir)
    self.assertLen(runs, 6)
    self.assertLen({n for n, _ in runs}, 6)
    self.assertEqual(
        sorted(c.train.steps for _, c in runs), [cap] * 3 + [3 * cap] * 3
    )
    self.assertLen(sweep.collect_runs(module, grid.format(1), workdir), 3)


if __name__ == "__main__":
  absltest.main()
