"""configs/width.py: runs at ratios of the threshold, each at its chosen lr."""

import os
import re
from unittest import mock

from absl.testing import absltest

from configs import width
from tests import paths
from ut.errors import UserError
from ut.experiments import sweep

ROOT = paths.ROOT


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


class WidthTest(absltest.TestCase):

  def test_runs_are_ratios_of_the_threshold_narrowest_first(self):
    # N by hand from the size formulas (docs/design.md), H = 2, k_u = d = 32:
    # attention-only L = 2: 2*32*(2+4) + 32*4; residual L = 2 and 3:
    # 2*32*2*(1+3) + 32*9 and 2*32*2*(1+3+9) + 32*27.
    n = {"dyck": 512, "khop1": 800, "khop2": 2528}
    self.assertEqual({c: width.threshold(c) for c in width.CELLS}, n)
    runs = sweep.collect_runs(_module("width.py"))
    ms = [c.model.m for _, c in runs]
    self.assertEqual(ms, sorted(ms))
    self.assertLen(runs, 3 * len(width.RATIOS) * 3)
    want = sorted(
        round(r * n[cell]) for cell in n for r in width.RATIOS for _ in range(3)
    )
    self.assertEqual(ms, want)
    for _, c in runs:
      self.assertEqual(c.model.kind, "random")
      self.assertEqual(c.model.ut_seed, c.seed)  # Each seed a new draw.
    with self.assertRaisesRegex(UserError, "cells='nope'"):
      sweep.collect_runs(_module("width.py"), "cells=nope")

  def test_dyck_runs_take_the_lr_chosen_at_their_width(self):
    module = _module("width.py")
    # The default takes the table's lr, and needs no width selection.
    with mock.patch.dict(module.DYCK_LRS, clear=True):
      table = sweep.collect_runs(module, "cells=dyck")
      self.assertTrue(all("train.lr" not in name for name, _ in table))
      with self.assertRaisesRegex(UserError, "width/select/selection.md"):
        sweep.collect_runs(module, "cells=dyck,lrs=selected")
    table_lr = module.get_config("cell=dyck").train.lr
    ms = [round(r * width.threshold("dyck")) for r in width.RATIOS]
    lrs = {m: table_lr if m < 256 else table_lr / 3 for m in ms}
    with mock.patch.dict(module.DYCK_LRS, lrs, clear=True):
      runs = sweep.collect_runs(module, "cells=dyck,lrs=selected")
    self.assertLen(runs, 3 * len(ms))
    for name, c in runs:
      self.assertEqual(c.train.lr, lrs[c.model.m])
      # A run at the table's lr keeps its name (and so its record).
      self.assertEqual("train.lr" in name, c.model.m >= 256, name)
    with mock.patch.dict(module.DYCK_LRS, {64: table_lr}, clear=True):
      with self.assertRaisesRegex(UserError, "DYCK_LRS has no lr for m=128"):
        sweep.collect_runs(module, "cells=dyck,lrs=selected")
      # The k-hop cells need no Dyck selection.
      self.assertNotEmpty(
          sweep.collect_runs(module, "cells=khop1,lrs=selected")
      )
    with self.assertRaisesRegex(UserError, "lrs='best'"):
      sweep.collect_runs(module, "lrs=best")
    with mock.patch.dict(module.DYCK_LRS, lrs, clear=True):
      some = sweep.collect_runs(module, "cells=dyck,lrs=selected,ratios=1+2")
    self.assertEqual(sorted({c.model.m for _, c in some}), [512, 1024])
    self.assertEqual(
        [c.train.lr for _, c in some], [lrs[512]] * 3 + [lrs[1024]] * 3
    )
    for bad in ("3", "x", "1+"):
      with self.assertRaisesRegex(UserError, f"ratios='{re.escape(bad)}'"):
        sweep.collect_runs(module, f"ratios={bad}")


if __name__ == "__main__":
  absltest.main()
