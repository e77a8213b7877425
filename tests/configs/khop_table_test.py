"""configs/khop_table.py: the selected hyperparameters and batches, and the
compiled rows at every k."""

import os
from unittest import mock

from absl.testing import absltest

from tests import paths
from ut.errors import UserError
from ut.experiments import sweep

ROOT = paths.ROOT


class SweepTest(absltest.TestCase):

  def test_khop_table_takes_the_selected_hyperparameters(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    grid = "ks=2,kinds=sparse+trained,variants=res_ln+res_ln_mlp,seeds=1"
    with mock.patch.dict(module.UTS, clear=True):
      with self.assertRaisesRegex(
          UserError,
          r"UTS has no choice for kind=sparse, variant=res_ln, k=2: choose "
          r"it with `python -m launch.sweep --config=configs/khop_select.py"
          r":part=uts .*khop/select_uts/selection.md",
      ):
        sweep.collect_runs(module, grid)
    trained = {("res_ln_mlp", 2): (3e-3, 1.0, "cosine")}
    uts = {"sparse": (1e-2, 0.3, "constant"), "random": (3e-2, 0.1, "constant")}
    with mock.patch.dict(module.TRAINED, trained, clear=True):
      with mock.patch.dict(module.UTS, uts, clear=True):
        runs = sweep.collect_runs(module, grid)
        # An explicit embed_scale wins over the selection's.
        scaled = sweep.collect_runs(module, grid + ",embed_scale=0.5")
        with self.assertRaisesRegex(
            UserError, r"no choice for kind=trained, variant=res_ln_mlp, k=3"
        ):
          sweep.collect_runs(module, grid.replace("ks=2", "ks=3"))
    got = {
        (c.model.kind, c.model.variant): (
            c.train.lr,
            c.model.embed_scale,
            c.train.schedule,
        )
        for _, c in runs
    }
    self.assertEqual(
        got,
        {
            ("sparse", "res_ln"): (1e-2, 0.3, "constant"),
            ("trained", "res_ln_mlp"): (3e-3, 1.0, "cosine"),
        },
    )
    self.assertEqual({c.model.embed_scale for _, c in scaled}, {0.5})

  def test_khop_table_at_the_selected_batch_trains_the_differing_rows(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    trained = {(v, 2): (1e-3, 1.0, "constant") for v in ("attn", "res_ln_mlp")}
    batches = {
        ("attn", 2): (32, 100),  # The protocol.
        ("res_ln_mlp", 2): (16, 1000),
    }
    grid = "ks=2,kinds=trained+sparse,seeds=2,compiled=False,batch=selected"
    with mock.patch.dict(module.TRAINED, trained, clear=True):
      with mock.patch.dict(module.BATCHES, clear=True):
        with self.assertRaisesRegex(
            UserError,
            r"BATCHES has no choice for kind=trained, variant=attn, k=2: .*"
            r"khop/select_batch/selection.md",
        ):
          sweep.collect_runs(module, grid)
      with mock.patch.dict(module.BATCHES, batches, clear=True):
        runs = sweep.collect_runs(module, grid)
    # Only the trained row whose choice differs, at that choice; the cap and
    # the evaluation interval in strings as at batch 32.
    self.assertLen(runs, 2)
    for _, c in runs:
      self.assertEqual(
          (c.model.kind, c.model.variant), ("trained", "res_ln_mlp")
      )
      self.assertEqual((c.train.batch_size, c.train.warmup_steps), (16, 1000))
      self.assertEqual(c.train.steps * 16, 20000 * 32)
      self.assertEqual(c.eval.every * 16, 500 * 32)
    with self.assertRaisesRegex(UserError, r"batch='x'; use protocol or"):
      sweep.collect_runs(module, "batch=x")

  def test_khop_grid_compiles_into_sparse_at_every_k(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    compiled = lambda arg: sorted(
        (c.data.k, c.compiled)
        for _, c in sweep.collect_runs(module, arg)
        if c.compiled
    )
    grid = "smoke,kinds=trained,variants=attn,seeds=1"
    self.assertEqual(
        compiled(grid), [(2, "random"), (2, "sparse"), (3, "sparse")]
    )
    self.assertEqual(
        compiled(grid + ",ks=3+4,random_compiled_ks=3"),
        [(3, "random"), (3, "sparse"), (4, "sparse")],
    )
    self.assertEqual(compiled(grid + ",compiled=false"), [])
    # At k = 2 the random UT also runs at the sparse UT's width.
    widths = sorted(
        c.model.m
        for _, c in sweep.collect_runs(
            module, "smoke,kinds=random,variants=attn,seeds=1"
        )
        if c.data.k == 2
    )
    self.assertEqual(widths, [256, 928])


if __name__ == "__main__":
  absltest.main()
