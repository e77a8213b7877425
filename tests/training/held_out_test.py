"""ut.training.held_out: evaluation counts (microbatched and data parallel),
one compile for every batch, and the fixed held-out sets."""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import train_helpers
from tests import xla_settings
from ut.errors import UserError
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out
from ut.training import models
from ut.training import step as step_lib


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  @parameterized.parameters("sparse", "random")
  def test_microbatched_eval_equals_numpy_counts(self, kind):
    config = train_helpers.smoke_config(
        "khop", f"model={kind},variant=res_ln_mlp"
    )
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    params = checkpoint.init_state(config, spec)[0].params
    batch = held_out.eval_batches(config, task)[0]
    # Counted in numpy from the whole batch's logits.
    logits = np.asarray(models.apply(params, spec, batch["tokens"]))
    labels, mask = np.asarray(batch["labels"]), np.asarray(batch["mask"])
    correct = int(((logits.argmax(-1) == labels) & mask).sum())
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    valid = labels >= 0
    nll = -np.take_along_axis(logp, np.maximum(labels, 0)[..., None], -1)[
        ..., 0
    ]
    loss = (nll * valid).sum() / valid.sum()
    # The data-parallel path (here on this process's device mesh; on 2 devices:
    # CommandLineTest.test_data_parallel_run_matches_one_device_run).
    dp_step = held_out.data_parallel_eval_step(spec, step_lib.batch_mesh())
    for metrics in [
        held_out.eval_step(params, batch, spec=spec, microbatches=n)
        for n in (1, 4)
    ] + [dp_step(params, batch)]:
      self.assertEqual(int(metrics["correct"]), correct)
      self.assertEqual(int(metrics["count"]), int(mask.sum()))
      np.testing.assert_allclose(float(metrics["loss"]), loss, rtol=1e-5)

  def test_evaluate_compiles_once(self):
    config = train_helpers.smoke_config(arg="model=random")
    config.model.num_layers = 1  # A spec no other test compiles.
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    params = models.init(jax.random.PRNGKey(0), spec)
    valid = held_out.eval_batches(config, task)
    self.assertEqual(len({len(b["tokens"]) for b in valid}), 1)
    traces = []
    real = step_lib.loss_and_metrics

    def counting(*args):
      traces.append(1)
      return real(*args)

    with mock.patch.object(step_lib, "loss_and_metrics", counting):
      first = held_out.held_out_metrics(params, spec, valid)
      second = held_out.held_out_metrics(params, spec, valid)
    self.assertEqual(first, second)
    self.assertLen(traces, 1)  # One trace for all batches of both calls.


class ProtocolTest(absltest.TestCase):

  def test_eval_batches_are_the_fixed_sets(self):
    config = dyck_config.get_config("smoke")
    task = data_lib.make_task(config)
    for split in ("valid", "test"):
      batches = held_out.eval_batches(config, task, split)
      self.assertTrue(
          all(len(b["tokens"]) <= config.eval.batch_size for b in batches)
      )
      np.testing.assert_array_equal(
          np.concatenate([b["tokens"] for b in batches]),
          task.held_out(split)["tokens"],
      )
    np.testing.assert_array_equal(
        held_out.eval_batches(config, task)[0]["tokens"],
        held_out.eval_batches(config, task, "valid")[0]["tokens"],
    )
    khop = khop_config.get_config("smoke")
    khop_task = data_lib.make_task(khop)
    # k-hop has no fixed sets: streams (seed, 1) and (seed, 2), of eval.num.
    valid, test = (
        np.concatenate(
            [b["tokens"] for b in held_out.eval_batches(khop, khop_task, s)]
        )
        for s in ("valid", "test")
    )
    self.assertLen(valid, khop.eval.num)
    np.testing.assert_array_equal(
        test,
        khop_task.batch(khop.eval.num, data_lib.stream_seed(khop.seed, 2))[
            "tokens"
        ],
    )
    self.assertFalse(np.array_equal(valid, test))
    with self.assertRaisesRegex(UserError, r"held-out split 'train'"):
      held_out.eval_batches(khop, khop_task, "train")


if __name__ == "__main__":
  absltest.main()
