"""ut.training.loop: early stopping, the test score at the best held-out
evaluation, and a diverging loss stopping the run."""

import os
import threading
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax.numpy as jnp

from tests import train_helpers
from tests import xla_settings
from ut.errors import UserError
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import loop
from ut.training import models
from ut.training import train


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  def test_early_stop_equals_a_run_of_that_many_steps(self):
    """A constant-lr run stopped early (the plateau rule, which with
    plateau_delta=1 fires at the second evaluation) ends with the params of
    an uninterrupted run of that many steps; resuming it trains no more."""
    every = 2
    stopping = train_helpers.smoke_config(
        steps=12,
        schedule="constant",
        plateau_evals=1,
        plateau_delta=1.0,
    )
    stopping.eval.every = every
    workdir = self.create_tempdir().full_path
    got = train.train_and_evaluate(stopping, workdir)
    self.assertEqual(got["step"], 2 * every)
    self.assertStartsWith(got["stopped_early"], "plateau")
    self.assertEqual([s for s, _ in got["curve"]], [every, 2 * every])
    self.assertEqual(
        sorted(os.listdir(os.path.join(workdir, "checkpoints")))[-1],
        str(2 * every),
    )
    short = train_helpers.smoke_config(steps=2 * every, schedule="constant")
    short.eval.every = every
    want = train.train_and_evaluate(short, self.create_tempdir().full_path)
    for key in train_helpers.FINAL_KEYS:
      self.assertEqual(got[key], want[key], key)
    self.assertEqual(got["curve"], want["curve"])
    self.assertIsNone(want["stopped_early"])
    # Resumed, the run sees its whole curve and stops where it was.
    again = train.train_and_evaluate(stopping, workdir)
    for key in train_helpers.FINAL_KEYS + ("curve", "stopped_early"):
      self.assertEqual(again[key], got[key], key)

  def test_test_at_best_valid_is_a_run_stopped_there(self):
    """With eval.test_each every evaluation scores the test set too, and
    test_at_best_valid holds the test accuracy at the first evaluation of
    best held-out accuracy: what a constant-lr run of that many steps scores
    on the test set at its end (`test_metrics` on its final params)."""
    config = train_helpers.smoke_config(
        "khop", steps=12, schedule="constant", lr=0.05
    )
    config.eval.update(every=2, test_each=True)
    workdir = self.create_tempdir().full_path
    got = train.train_and_evaluate(config, workdir)
    rows = train_helpers.read_csv(os.path.join(workdir, "eval_metrics.csv"))
    self.assertEqual(
        got["test_curve"],
        [[int(r["step"]), float(r["test_accuracy"])] for r in rows],
    )
    self.assertEqual(got["test_curve"][-1][1], got["test_accuracy"])
    valid = [float(r["accuracy"]) for r in rows]
    best = got["test_at_best_valid"]
    self.assertEqual(best["step"], int(rows[valid.index(max(valid))]["step"]))
    self.assertEqual(best["valid_accuracy"], max(valid))
    short = train_helpers.smoke_config(
        "khop", steps=best["step"], schedule="constant", lr=0.05
    )
    short.eval.every = 2
    want = train.train_and_evaluate(short, self.create_tempdir().full_path)
    self.assertEqual(best["test_accuracy"], want["test_accuracy"])
    self.assertNotIn("test_at_best_valid", want)  # Off by default.

  @parameterized.named_parameters(
      ("off", dict(), [0.1, 0.2, 0.2, 0.2], False),
      ("accuracy_twice", dict(stop_accuracy=0.9), [0.5, 0.9, 0.95], True),
      ("accuracy_once", dict(stop_accuracy=0.9), [0.95, 0.5, 0.95], False),
      (
          "accuracy_three",
          dict(stop_accuracy=0.9, stop_evals=3),
          [0.5, 0.91, 0.92],
          False,
      ),
      (
          "plateau",
          dict(plateau_evals=2, plateau_delta=0.01),
          [0.5, 0.8, 0.805, 0.79],
          True,
      ),
      (
          "rising",
          dict(plateau_evals=2, plateau_delta=0.01),
          [0.5, 0.8, 0.79, 0.82],
          False,
      ),
      ("too_short", dict(plateau_evals=2), [0.5, 0.5], False),
  )
  def test_stop_reason(self, rules, accs, stops):
    tc = train_helpers.smoke_config().train
    tc.update(rules)
    curve = [(100 * (i + 1), a) for i, a in enumerate(accs)]
    self.assertEqual(loop.stop_reason(tc, curve) is not None, stops)

  def test_nan_loss_stops_with_the_step(self):
    """NaN logits from step 5 on (a patched model): TrainingDiverged at step 5."""
    poison_from = 4  # 0-based index of the first bad batch: reported as step 5.
    real_batch, real_apply = data_lib.train_batch, models.apply

    def batch_with_marker(config, task, step):
      batch = real_batch(config, task, step)
      if step >= poison_from:
        batch = dict(batch, tokens=batch["tokens"].copy())
        batch["tokens"][:, 0] = -1  # Marker read by nan_apply below.
      return batch

    def nan_apply(params, spec, tokens_BxT, precision=None, last_only=False):
      logits = real_apply(
          params, spec, jnp.maximum(tokens_BxT, 0), precision, last_only
      )
      return jnp.where(jnp.any(tokens_BxT < 0), jnp.nan, logits)

    # The trained kind: a spec no other in-process test compiles.
    config = train_helpers.smoke_config(arg="model=trained", steps=8)
    workdir = self.create_tempdir().full_path
    threads = {t.ident for t in threading.enumerate()}
    with (
        mock.patch.object(data_lib, "train_batch", batch_with_marker),
        mock.patch.object(models, "apply", nan_apply),
    ):
      with self.assertRaises(loop.TrainingDiverged) as cm:
        train.train_and_evaluate(config, workdir)
    # Nothing of the run goes on (the TensorBoard writer is closed too). A
    # closed multiprocessing queue's feeder thread (tensorboardX's) exits on
    # its own, just after close(): wait for that; a writer left open would
    # keep its thread alive past the wait.
    new = [t for t in threading.enumerate() if t.ident not in threads]
    for t in new:
      t.join(timeout=10)
    self.assertEqual([t.name for t in new if t.is_alive()], [])
    self.assertIsInstance(cm.exception, UserError)
    self.assertRegex(
        str(cm.exception),
        r"loss became nan at step 5 \(last finite loss " r"[0-9.]+,",
    )
    self.assertRegex(str(cm.exception), r"--config\.train\.lr")
    self.assertFalse(os.path.exists(os.path.join(workdir, "metrics.json")))
    # The checkpoint saved just before (step 4) is complete and finite.
    params, _, _, _, step = checkpoint.restore_params(workdir)
    self.assertEqual(step, poison_from)
    chex.assert_tree_all_finite(params)


if __name__ == "__main__":
  absltest.main()
