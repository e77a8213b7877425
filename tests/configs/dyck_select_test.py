"""configs/dyck_select.py: the exact part's learning rates per row."""

import os

from absl.testing import absltest

from tests import paths
from ut.errors import UserError
from ut.experiments import sweep

ROOT = paths.ROOT


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


class SelectionTest(absltest.TestCase):

  def test_dyck_exact_part_gives_each_row_its_kinds_lrs(self):
    runs = sweep.collect_runs(_module("dyck_select.py"), "part=exact")
    cells = {}
    for _, c in runs:
      self.assertEqual((c.seed, c.train.steps), (100, 3000))
      key = (c.model.kind, c.model.variant, c.data.mix)
      cells.setdefault(key, set()).add(c.train.lr)
    self.assertLen(cells, 8 * 2)
    self.assertEqual({k[2] for k in cells}, {"za_exact", "hard"})
    self.assertEqual(
        cells[("gpt2_random", "res_ln_mlp", "hard")], {1e-3, 3e-3, 1e-2}
    )
    self.assertEqual(
        cells[("random", "res_ln_mlp", "za_exact")], {3e-3, 1e-2, 3e-2}
    )
    self.assertEqual(cells[("trained", "attn", "hard")], {3e-4, 1e-3, 3e-3})
    with self.assertRaisesRegex(UserError, "part='x'; use za or exact"):
      sweep.collect_runs(_module("dyck_select.py"), "part=x")


if __name__ == "__main__":
  absltest.main()
