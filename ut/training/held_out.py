"""Held-out evaluation: a run's accuracy and loss on data it never trains on.

`eval_batches` cuts a task's validation or test set into batches (its fixed
set, or a seed stream the training batches never draw from);
`held_out_metrics` scores them, on one device or split over a mesh;
`evaluation` is what the loop runs at every evaluation, and `test_metrics`
the test score of a run's final metrics.
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from ut.errors import UserError
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib


@functools.partial(jax.jit, static_argnames=("spec", "microbatches"))
def eval_step(
    params: dict, batch: dict, *, spec, microbatches: int = 1
) -> dict:
  """The metrics of one batch, computed `microbatches` parts at a time.

  The sums are exact (counts) or equal up to float rounding (the loss); the
  parts keep a forward pass's m-wide state in the caches, as in
  `step.train_step`.
  """
  if microbatches == 1:
    return step_lib.loss_and_metrics(params, spec, batch)[1]
  return _mean_loss(
      eval_sums(params, batch, spec=spec, microbatches=microbatches)
  )


def eval_sums(params, batch, *, spec, microbatches):
  """(cross-entropy sum, metrics with 'labelled') of one batch, in parts."""
  sums = jax.lax.map(
      lambda part: step_lib.loss_and_metrics(params, spec, part, mean=False),
      step_lib.split(batch, microbatches),
  )
  return jax.tree.map(lambda a: a.sum(0), sums)


def _mean_loss(sums):
  ce_sum, metrics = sums
  metrics = dict(metrics)
  loss = ce_sum / jnp.maximum(metrics.pop("labelled"), 1)
  return dict(loss=loss, **metrics)


@functools.lru_cache(maxsize=8)
def data_parallel_eval_step(spec, mesh):
  """`eval_step`, jitted, with the batch split over the devices of `mesh`
  (axis 'batch') as in `step.data_parallel_step`: each device sums its share's
  metrics and the sums are added across devices."""

  def local(params, batch):
    n = implementation.microbatches(*batch["tokens"].shape, spec)
    return eval_sums(params, batch, spec=spec, microbatches=n)

  sums = step_lib.summed_over_shares(local, mesh)
  return jax.jit(lambda params, batch: _mean_loss(sums(params, batch)))


def held_out_metrics(
    params: dict, spec, eval_batches: list, mesh: Mesh | None = None
) -> dict:
  """Accuracy and mean loss over a list of batches (`implementation.microbatches`
  parts of each at a time). With a mesh (axis 'batch'), each batch whose size
  its devices divide is split over them (`data_parallel_eval_step`)."""
  correct = count = 0
  loss_sum = 0.0
  # Tokens per string -> params with split layers (`step.make_step`); a copy of
  # the frozen maps per call, beside the held-out set's many forwards.
  split = {}
  for batch in eval_batches:
    t = batch["tokens"].shape[1]
    if mesh is None and t not in split:
      split[t] = implementation.split_frozen(params, spec, t)
    p = params if mesh is not None else split[t]
    if mesh is not None and len(batch["tokens"]) % mesh.size == 0:
      m = jax.device_get(
          data_parallel_eval_step(spec, mesh)(
              params, jax.device_put(batch, NamedSharding(mesh, P("batch")))
          )
      )
    else:
      m = jax.device_get(
          eval_step(
              p,
              batch,
              spec=spec,
              microbatches=implementation.microbatches(
                  *batch["tokens"].shape, spec
              ),
          )
      )
    correct += int(m["correct"])
    count += int(m["count"])
    loss_sum += float(m["loss"]) * len(batch["tokens"])
  n = sum(len(b["tokens"]) for b in eval_batches)
  return dict(accuracy=correct / max(count, 1), loss=loss_sum / max(n, 1))


def evaluation(
    params: dict,
    spec,
    valid: list,
    test: list | None = None,
    mesh: Mesh | None = None,
) -> dict:
  """`held_out_metrics` on the validation batches; with test batches
  (config.eval.test_each), the test set's as test_accuracy and test_loss."""
  out = held_out_metrics(params, spec, valid, mesh)
  if test is not None:
    scored = held_out_metrics(params, spec, test, mesh)
    out.update(test_accuracy=scored["accuracy"], test_loss=scored["loss"])
  return out


def test_batches(config, task) -> list | None:
  """The test batches scored at every evaluation, or None
  (config.eval.test_each)."""
  if not config.eval.get("test_each", False):
    return None
  return eval_batches(config, task, "test")


def eval_batches(config, task, split: str = "valid") -> list:
  """A held-out set in batches of config.eval.batch_size.

  The task's fixed `split` set ('valid' or 'test') when it has one (Dyck:
  `data.Dyck.held_out`; config.eval.num is then unused). Otherwise
  config.eval.num examples from the seed stream (seed, 1) for 'valid' and
  (seed, 2) for 'test': streams the training batches (seed, 0, step) never
  draw from.
  """
  if split not in HELD_OUT_STREAMS:
    raise UserError(f"held-out split {split!r}; use valid or test")
  held_out = getattr(task, "held_out", None)
  full = held_out(split) if held_out else None
  if full is None:
    full = task.batch(
        config.eval.num,
        data_lib.stream_seed(config.seed, HELD_OUT_STREAMS[split]),
    )
  n, bs = len(full["tokens"]), config.eval.batch_size
  return [
      jax.tree.map(lambda a, i=i: a[i : i + bs], full) for i in range(0, n, bs)
  ]


HELD_OUT_STREAMS = {"valid": 1, "test": 2}


_logits = jax.jit(models.apply, static_argnums=1)


def test_metrics(
    params: dict, spec, config, task, mesh: Mesh | None = None
) -> dict:
  """A run's score on its task's fixed test set, for its final metrics.

  dict(test_accuracy, test_loss) on `eval_batches(..., "test")`, and
  test_breakdown where the task has a `breakdown` and a fixed test set (Dyck:
  by length, by subset, the counting baseline beside).
  """
  held_out = getattr(task, "held_out", None)
  batch = held_out("test") if held_out else None
  batches = eval_batches(config, task, "test")
  metrics = held_out_metrics(params, spec, batches, mesh)
  out = dict(test_accuracy=metrics["accuracy"], test_loss=metrics["loss"])
  if batch is not None and hasattr(task, "breakdown"):
    preds = np.concatenate(
        [
            np.asarray(_logits(params, spec, b["tokens"])).argmax(-1)
            for b in batches
        ]
    )
    out["test_breakdown"] = task.breakdown(batch, preds)
  return out
