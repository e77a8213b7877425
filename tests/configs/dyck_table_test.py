"""configs/dyck_table.py: the paper's rows, the selected learning rates, and
seeds that draw new machines."""

import collections
import os
from unittest import mock

from absl.testing import absltest
import numpy as np

from tests import paths
from ut.errors import UserError
from ut.experiments import sweep
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import models

ROOT = paths.ROOT


class SweepTest(absltest.TestCase):

  def test_dyck_table_has_the_papers_rows(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )
    runs = sweep.collect_runs(module, "smoke,mixes=za")
    cells = collections.Counter(
        (c.model.kind, c.model.variant, c.model.m, c.compiled)
        for _, c in runs
        if c.model.kind != "sparse"
    )
    self.assertEqual(
        cells,
        {
            ("random", "attn", 256, ""): 3,
            ("random", "attn", 512, ""): 3,
            ("trained", "attn", 256, ""): 3,
            ("trained", "attn", 256, "sparse"): 3,
            ("trained", "attn", 256, "random"): 3,
            ("trained", "res_ln_mlp", 256, ""): 3,
        },
    )
    self.assertLen([c for _, c in runs if c.model.kind == "sparse"], 3)
    only = sweep.collect_runs(
        module, "smoke,mixes=za,kinds=random,compiled=false"
    )
    self.assertEqual(sorted({c.model.m for _, c in only}), [256, 512])
    with self.assertRaisesRegex(UserError, "rows='some'"):
      sweep.collect_runs(module, "rows=some")

  def test_dyck_table_takes_the_selected_learning_rates(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )
    with mock.patch.dict(module.LRS, clear=True):
      with self.assertRaisesRegex(
          UserError,
          r"LRS has no choice for kind=sparse, variant=attn: choose it with "
          r"`python -m launch.sweep --config=configs/dyck_select.py .*"
          r"dyck/select/selection.md",
      ):
        sweep.collect_runs(module, "mixes=hard,compiled=false")
    chosen = {
        ("sparse", "attn"): 3e-2,
        ("random", "attn"): 3e-3,
        ("trained", "attn"): 3e-4,
        ("trained", "res_ln_mlp"): 1e-3,
    }
    with mock.patch.dict(module.LRS, chosen, clear=True):
      runs = sweep.collect_runs(module, "mixes=hard,compiled=false")
    got = {
        (c.model.kind, c.model.variant, c.model.m): c.train.lr for _, c in runs
    }
    self.assertEqual(got[("sparse", "attn", 256)], 3e-2)
    self.assertEqual(got[("random", "attn", 256)], 3e-3)
    self.assertEqual(got[("random", "attn", 512)], 3e-3)
    self.assertEqual(got[("trained", "res_ln_mlp", 256)], 1e-3)

  def test_table_seeds_draw_new_machines(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )
    runs = sweep.collect_runs(
        module,
        "smoke,rows=all,mixes=za,kinds=random,variants=res_ln_mlp,seeds=3",
    )
    self.assertEqual([c.model.ut_seed for _, c in runs], [0, 1, 2])
    # The frozen weights (the UT and its MLP) differ between seeds.
    task = data_lib.make_task(runs[0][1])
    params = [
        checkpoint.init_state(c, models.model_spec(c, task.info))[0].params
        for _, c in runs
    ]
    for frozen in (("layers", "wq"), ("mlp", "w1")):
      a, b = (np.asarray(p[frozen[0]][frozen[1]]) for p in params[:2])
      self.assertFalse(np.allclose(a, b), frozen)
    # An explicit ut_seed keeps the machine across program seeds.
    fixed = [
        module.get_config(f"model=random,seed={s},ut_seed=7,smoke")
        for s in (0, 1)
    ]
    self.assertEqual([c.model.ut_seed for c in fixed], [7, 7])


if __name__ == "__main__":
  absltest.main()
