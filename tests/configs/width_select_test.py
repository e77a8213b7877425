"""configs/width_select.py: every lr at every Dyck width."""

import os

from absl.testing import absltest

from configs import width
from configs import width_select
from tests import paths
from ut.experiments import sweep

ROOT = paths.ROOT


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


class SelectionTest(absltest.TestCase):

  def test_width_selection_tries_every_lr_at_every_dyck_width(self):
    runs = sweep.collect_runs(_module("width_select.py"), None)
    n = width.threshold("dyck")
    got = sorted((c.model.m, c.train.lr) for _, c in runs)
    want = sorted(
        (round(r * n), lr) for r in width.RATIOS for lr in (1e-2, 3e-3, 3e-2)
    )
    self.assertEqual(got, want)
    for _, c in runs:  # Each run the width sweep's Dyck run but for seed, lr.
      self.assertEqual((c.model.kind, c.model.variant), ("random", "attn"))
      self.assertEqual(c.model.ut_seed, c.seed)
      self.assertEqual(c.data.mix, "za")
    smoke = sweep.collect_runs(_module("width_select.py"), "smoke")
    self.assertLen(smoke, 2 * len(width.RATIOS))
    self.assertEqual({c.seed for _, c in smoke}, {width_select.VALIDATION_SEED})


if __name__ == "__main__":
  absltest.main()
