"""configs/khop_select.py: the Sanford part's grids, the batch part, and the
attention-only trained model's schedules."""

import os
from unittest import mock

from absl.testing import absltest

from configs import khop_select
from configs import khop_table
from tests import paths
from ut.experiments import sweep

ROOT = paths.ROOT


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


class SelectionTest(absltest.TestCase):

  def test_sanford_part_gives_each_row_its_own_grid(self):
    runs = sweep.collect_runs(_module("khop_select.py"), "part=sanford")
    self.assertFalse({c.seed for _, c in runs} - {100, 101})
    grid = {}
    for _, c in runs:
      self.assertEqual(
          (c.data.length, c.data.alphabet, c.data.k, c.model.num_layers),
          (100, 4, 2, 3),
      )
      self.assertEqual(
          (c.train.plateau_evals, c.train.plateau_delta), (8, 0.005)
      )
      self.assertEqual(c.train.steps // c.eval.every // 5, 8)  # A fifth.
      cell = (c.model.kind, c.model.variant)
      grid.setdefault(cell, set()).add(
          (c.train.lr, c.model.embed_scale, c.seed)
      )
    uts = {
        (lr, s, seed)
        for lr in (1e-2, 3e-2)
        for s in (0.1, 0.3, 1.0)
        for seed in (100, 101)
    }
    trained = {
        (lr, 1.0, seed) for lr in (3e-4, 1e-3, 3e-3) for seed in (100, 101)
    }
    self.assertEqual(
        grid,
        {
            ("sparse", "attn"): uts,
            ("random", "attn"): uts,
            ("trained", "attn"): trained,
            ("trained", "res_ln_mlp"): trained,
        },
    )

  def test_batch_part_sees_the_same_strings_between_evaluations(self):
    module = _module("khop_select.py")
    runs = [c for _, c in sweep.collect_runs(module, "part=batch,smoke")]
    self.assertEqual({c.seed for c in runs}, {khop_select.VALIDATION_SEEDS[0]})
    self.assertLen({c.train.batch_size for c in runs}, 2)
    for c in runs:  # Cap and evaluation interval in strings, as at batch 8.
      self.assertEqual(c.train.steps * c.train.batch_size, 4 * 8)
      self.assertEqual(c.eval.every * c.train.batch_size, 2 * 8)
    with mock.patch.object(
        khop_table, "selected", return_value=(0.005, 0.3, "cosine")
    ):
      full = [c for _, c in sweep.collect_runs(module, "part=batch,ks=3")]
    want = {
        (round(32 * b), 100 * w) for b, w in khop_select.BATCHES
    }  # Trained models only at k = 3; every candidate for each.
    for variant in ("res_ln_mlp", "attn"):
      got = {
          (c.train.batch_size, c.train.warmup_steps)
          for c in full
          if c.model.variant == variant and c.seed == 100
      }
      self.assertEqual(got, want)
    self.assertEqual({c.model.kind for c in full}, {"trained"})
    for c in full:
      self.assertEqual(c.train.steps * c.train.batch_size, 20000 * 32)
      self.assertEqual(c.eval.every * c.train.batch_size, 500 * 32)
      self.assertEqual((c.train.lr, c.train.schedule), (0.005, "cosine"))
    with mock.patch.object(
        khop_table, "selected", return_value=(0.005, 0.3, "constant")
    ):
      uts = [c for _, c in sweep.collect_runs(module, "part=batch,ks=2")]
    scales = {c.model.embed_scale for c in uts if c.model.kind != "trained"}
    self.assertEqual(scales, {0.3})

  def test_attention_only_trained_model_also_tries_a_cosine_schedule(self):
    runs = sweep.collect_runs(_module("khop_select.py"), None)
    cosine = {
        (c.model.kind, c.model.variant, c.train.lr)
        for _, c in runs
        if c.train.schedule == "cosine"
    }
    self.assertEqual(
        cosine, {("trained", "attn", 1e-3), ("trained", "attn", 3e-4)}
    )
    # Every cosine run has its constant twin (same cell, lr and seed).
    constant = {
        (c.model.variant, c.data.k, c.train.lr, c.seed)
        for _, c in runs
        if c.train.schedule == "constant"
    }
    for _, c in runs:
      if c.train.schedule == "cosine":
        self.assertIn((c.model.variant, c.data.k, c.train.lr, c.seed), constant)


if __name__ == "__main__":
  absltest.main()
