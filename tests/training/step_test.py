"""ut.training.step: the loss on the last position, microbatched steps, and
the step `make_step` builds on split frozen layers."""

import dataclasses
import functools
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from tests import train_helpers
from tests import xla_settings
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  @parameterized.parameters("sparse", "random", "trained")
  def test_dyck_loss_reads_the_last_position_only(self, kind):
    """Dyck's spec computes the last position only (TaskInfo.labels_last_only);
    its loss, counts and gradients equal those of the full forward."""
    config = train_helpers.smoke_config(arg=f"model={kind},variant=res_ln_mlp")
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    self.assertTrue(spec.last_only)
    self.assertFalse(
        models.model_spec(
            train_helpers.smoke_config("khop"),
            data_lib.make_task(train_helpers.smoke_config("khop")).info,
        ).last_only
    )
    full = dataclasses.replace(spec, last_only=False)
    params = checkpoint.init_state(config, spec)[0].params
    batch = data_lib.train_batch(config, task, 0)
    grad = lambda s: jax.grad(
        lambda p: step_lib.loss_and_metrics(p, s, batch)[0]
    )(params)
    got, want = (
        step_lib.loss_and_metrics(params, s, batch)[1] for s in (spec, full)
    )
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
    self.assertEqual(int(got["correct"]), int(want["correct"]))
    self.assertEqual(int(got["count"]), int(want["count"]))
    chex.assert_trees_all_close(grad(spec), grad(full), rtol=2e-4, atol=1e-6)

  @parameterized.parameters("sparse", "random")
  def test_microbatched_step_equals_whole_batch_step(self, kind):
    config = train_helpers.smoke_config(
        "khop", f"model={kind},variant=res_ln_mlp", batch_size=8
    )
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    state, tx, _ = checkpoint.init_state(config, spec)
    batch = data_lib.train_batch(config, task, 0)
    steps = [
        jax.jit(
            lambda s, b, n=n: step_lib.train_step(
                s, b, spec=spec, tx=tx, microbatches=n
            )
        )(state, batch)
        for n in (1, 4)
    ]
    (whole, whole_metrics), (parts, parts_metrics) = steps
    chex.assert_trees_all_close(
        parts.params, whole.params, atol=1e-5, rtol=1e-5
    )
    np.testing.assert_allclose(
        parts_metrics["loss"], whole_metrics["loss"], rtol=1e-5
    )
    self.assertEqual(int(parts_metrics["count"]), int(whole_metrics["count"]))

  def test_step_reads_split_layers_as_the_plain_step_reads_stacked(self):
    """`make_step` passes an attention-only random UT in its coefficient
    form the frozen layers split (`implementation.split_frozen`): the same states as
    the plain jitted `train_step`, split once for the states it returns, and
    anew for another state."""
    config = train_helpers.smoke_config(
        task="khop", arg="model=random,variant=attn,k=2", batch_size=8
    )
    config.model.m = 64
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    t = data_lib.train_batch(config, task, 0)["tokens"].shape[1]
    self.assertTrue(implementation.splits_layers(spec, t))  # impl auto on CPU.
    state, tx, _ = checkpoint.init_state(config, spec)
    plain = jax.jit(functools.partial(step_lib.train_step, spec=spec, tx=tx))
    step = step_lib.make_step(config, spec, tx)[0]
    want = state
    got = jax.tree.map(jnp.array, state)  # Its own buffers: it is donated.
    with mock.patch.object(
        implementation, "split_frozen", wraps=implementation.split_frozen
    ) as split:
      for i in range(3):
        batch = data_lib.train_batch(config, task, i)
        want, want_metrics = plain(want, batch)
        got, metrics = step(got, batch)
        chex.assert_trees_all_close(metrics, want_metrics, rtol=1e-5)
      self.assertEqual(split.call_count, 1)
      chex.assert_trees_all_close(got.params, want.params, rtol=1e-5, atol=1e-6)
      other, _, _ = checkpoint.init_state(config, spec)
      step(other, data_lib.train_batch(config, task, 0))
      self.assertEqual(split.call_count, 2)


if __name__ == "__main__":
  absltest.main()
