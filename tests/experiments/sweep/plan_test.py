"""ut.experiments.sweep.plan: the runs a sweep adds, checked before training,
and its work units."""

import os
import types

from absl.testing import absltest

from tests import paths
from tests import sweep_config
from ut.errors import UserError
from ut.experiments import sweep

ROOT = paths.ROOT


class SweepTest(absltest.TestCase):

  def test_work_units_keep_compiled_runs_after_their_target(self):
    runs = sweep.collect_runs(
        sweep.load_config_module(
            os.path.join(ROOT, "configs", "dyck_table.py")
        ),
        "smoke,rows=all,kinds=trained+random,variants=attn,seeds=2,mixes=hard",
    )
    groups = {}
    for name, config in runs:
      groups.setdefault(sweep.group_key(config), []).append((name, config))
    groups = list(groups.values())
    self.assertIs(sweep.work_units(groups, vmapped=True), groups)
    units = sweep.work_units(groups, vmapped=False)
    self.assertCountEqual(
        [n for unit in units for n, _ in unit], [n for n, _ in runs]
    )
    self.assertLen(units, 4)  # 2 seeds x 2 kinds.
    for unit in units:
      (target, config), *compiled_runs = unit
      self.assertEqual(config.compiled, "")
      # The trained model's two compiled-UT runs follow it; random has none.
      self.assertLen(compiled_runs, 2 if config.model.kind == "trained" else 0)
      for name, c in compiled_runs:
        self.assertEqual(name.split("_compiled=")[0], target)

  def test_bad_override_or_schedule_is_named_before_training(self):
    def module(overrides):
      return types.SimpleNamespace(
          get_config=sweep_config.get_config,
          sweep=lambda add: add("model=random,smoke", **overrides),
      )

    for overrides, pattern in (
        (
            {"trian.lr": 1e-2},
            r"override 'trian.lr': no such config field "
            r"\(fields here: .*train",
        ),
        ({"train.lr.x": 1}, r"override 'train.lr.x': no such config field"),
        ({"train.lrr": 1}, r"override 'train.lrr': no such config field"),
        (
            {"eval.every": 0},
            r"run .*eval.every=0: config.eval.every=0; use an " r"integer >= 1",
        ),
    ):
      with self.assertRaisesRegex(UserError, pattern):
        sweep.collect_runs(module(overrides))
    table = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    with self.assertRaisesRegex(UserError, r"seeds=0; use 1 or more"):
      sweep.collect_runs(table, "smoke,seeds=0")


if __name__ == "__main__":
  absltest.main()
