"""The training step: one pure, module-level function (STYLE 8).

`train_step(state, batch, *, spec, tx)` is one optimizer step on the mean
cross-entropy of the batch's labelled positions. `make_step` jits it as
training runs it: on one device, or with each batch split over this
process's devices (config.train.data_parallel; `data_parallel_step`), with
the options of the model's implementation (`implementation.step_options`;
off the CPU the plain step). Where those options take the batch in parts,
`grad_sums` adds up the parts' loss sums and gradients.
"""

import functools
from typing import Callable

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax

from ut.errors import UserError
from ut.training import implementation
from ut.training import models
from ut.training import optimizer
from ut.training.optimizer import TrainState


def loss_and_metrics(
    params: dict, spec, batch: dict, mean: bool = True
) -> tuple[jax.Array, dict]:
  """Cross-entropy over the labelled positions, and the step's metrics.

  mean=False returns the sum instead of the mean, and the number of labelled
  positions as metrics['labelled'] (microbatches are added up in `grad_sums`).
  """
  logits = models.apply(params, spec, batch["tokens"], last_only=spec.last_only)
  labels, scored = batch["labels"], batch["mask"]
  if spec.last_only:  # Labels elsewhere are -1 and unscored (TaskInfo).
    labels, scored = labels[:, -1:], scored[:, -1:]
  valid = labels >= 0
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits, jnp.maximum(labels, 0)
  )
  correct = (jnp.argmax(logits, -1) == labels) & scored
  metrics = dict(correct=jnp.sum(correct), count=jnp.sum(scored))
  if not mean:
    return jnp.sum(ce * valid), dict(metrics, labelled=jnp.sum(valid))
  loss = jnp.sum(ce * valid) / jnp.maximum(jnp.sum(valid), 1)
  return loss, dict(loss=loss, **metrics)


def _stop_frozen_gradients(params, labels):
  """Frozen leaves get stop_gradient: XLA then skips their weight gradients."""
  return jax.tree.map(
      lambda p, label: jax.lax.stop_gradient(p) if label == "frozen" else p,
      params,
      labels,
  )


def split(batch: dict, n: int) -> dict:
  """Every (B, ...) array of the batch as (n, B / n, ...): n microbatches."""
  return jax.tree.map(
      lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:]), batch
  )


def _forward_params(params, spec, layers, labels):
  """What the forward reads: params with frozen gradients stopped, and with
  `layers` (`implementation.split_frozen`'s) in place of params['layers'] if
  given. labels: `models.labels` of params (None: computed here)."""
  labels = models.labels(params, spec) if labels is None else labels
  params = _stop_frozen_gradients(params, labels)
  return params if layers is None else dict(params, layers=layers)


def train_step(
    state: TrainState,
    batch: dict,
    *,
    spec,
    tx: optax.GradientTransformation,
    microbatches: int | None = None,
    layers: dict | None = None,
    labels: dict | None = None,
) -> tuple[TrainState, dict]:
  """One optimizer step; returns the new state and the step's metrics.

  microbatches (`implementation.step_options`'; 1 off the CPU): with more
  than 1 the batch is split into that many equal parts whose loss sums and
  gradients a `lax.scan` adds up (`grad_sums`): the same step up to float
  rounding, in less memory. None: `implementation.microbatches` of the
  batch's shape. layers: the frozen layers as `implementation.split_frozen`
  splits them, which the forward reads in place of state.params['layers']
  (the same values; `make_step` passes them). labels: `models.labels` of
  the params (None: computed when traced).
  """
  b, t = batch["tokens"].shape
  n = microbatches or implementation.microbatches(b, t, spec)
  if b % n:
    raise ValueError(f"microbatches={n} does not divide the batch size {b}")
  if n == 1:
    grad_fn = jax.value_and_grad(
        lambda p: loss_and_metrics(
            _forward_params(p, spec, layers, labels), spec, batch
        ),
        has_aux=True,
    )
    (_, metrics), grads = grad_fn(state.params)
    return optimizer.apply_gradients(state, grads, metrics, tx)
  sums = grad_sums(
      state.params,
      batch,
      spec=spec,
      microbatches=n,
      layers=layers,
      labels=labels,
  )
  return optimizer.apply_gradient_sums(state, sums, tx)


def grad_sums(
    params: dict,
    batch: dict,
    *,
    spec,
    microbatches: int,
    layers: dict | None = None,
    labels: dict | None = None,
):
  """((cross-entropy sum, metrics), its gradient) over the batch, summed over
  `microbatches` equal parts by a `lax.scan`; metrics['labelled'] counts the
  labelled positions. Sums add up across parts, and across devices. layers,
  labels: as in `train_step`."""
  grad_fn = jax.value_and_grad(
      lambda p, part: loss_and_metrics(
          _forward_params(p, spec, layers, labels), spec, part, mean=False
      ),
      has_aux=True,
  )
  parts = split(batch, microbatches)
  zeros = jax.tree.map(
      lambda a: jnp.zeros(a.shape, a.dtype),
      jax.eval_shape(grad_fn, params, jax.tree.map(lambda a: a[0], parts)),
  )
  add = lambda total, part: (
      jax.tree.map(jnp.add, total, grad_fn(params, part)),
      None,
  )
  return jax.lax.scan(add, zeros, parts)[0]


def data_parallel_step(
    spec,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    microbatches: int | None = 1,
    labels: dict | None = None,
) -> Callable:
  """`train_step` with the batch split over the devices of `mesh` (axis
  'batch'): each device sums its share's gradients (`grad_sums`, in
  `microbatches` parts; None: `implementation.microbatches` of its share,
  as on CPU), the sums
  are added across devices, and every device applies the same update to its
  copy of the state. The same step as `train_step` up to the order of float
  additions."""

  def local(params, batch):
    n = microbatches or implementation.microbatches(
        *batch["tokens"].shape, spec
    )
    return grad_sums(params, batch, spec=spec, microbatches=n, labels=labels)

  sums = summed_over_shares(local, mesh)
  return lambda state, batch: optimizer.apply_gradient_sums(
      state, sums(state.params, batch), tx
  )


def summed_over_shares(local: Callable, mesh: Mesh) -> Callable:
  """local(params, batch) with the batch split over the devices of `mesh`
  (axis 'batch'), each device's result added up across them."""
  # check_vma=False: the custom VJPs of `ut.core.transformer` do not annotate how
  # their outputs vary across devices.
  summed = lambda params, batch: jax.lax.psum(local(params, batch), "batch")
  return jax.shard_map(
      summed,
      mesh=mesh,
      in_specs=(P(), P("batch")),
      out_specs=P(),
      check_vma=False,
  )


def check_data_parallel(config) -> None:
  """A UserError unless each training batch splits: over this process's
  devices (config.train.data_parallel), and each device's share into
  config.cpu.microbatches parts."""
  n, b = jax.local_device_count(), config.train.batch_size
  if config.train.data_parallel and b % n:
    raise UserError(
        f"config.train.batch_size={b} must be a multiple of the "
        f"{n} devices it is split over (config.train.data_parallel)"
        f"; e.g. batch_size={n * max(1, b // n)}"
    )
  share = b // n if config.train.data_parallel else b
  implementation.check_microbatches(config, share)


def make_step(
    config, spec, tx: optax.GradientTransformation, labels: dict | None = None
) -> tuple[Callable, Callable, Callable]:
  """(jitted step, place_state, place_batch) as `train_and_evaluate` runs them.

  config.train.data_parallel: split each batch over this process's devices
  (`data_parallel_step`; e.g. `launch.train --cpu_devices=2` on a 2-core CPU,
  or several GPUs), the state copied to each. Otherwise `train_step` on one
  device. The model's implementation sets the rest
  (`implementation.step_options`: on CPU, config.cpu's XLA options and
  microbatches; elsewhere the plain step). labels: `models.labels` of the
  params (None: computed when traced).
  """
  options = implementation.step_options(config, spec)
  if not config.train.data_parallel:
    step = jax.jit(
        functools.partial(
            train_step,
            spec=spec,
            tx=tx,
            microbatches=options.microbatches,
            labels=labels,
        ),
        donate_argnums=0,
        **options.jit,
    )
    return options.wrap(step), lambda s: s, lambda b: b
  check_data_parallel(config)
  mesh = batch_mesh()
  logging.info(
      "data parallel: each batch split over %d %s devices",
      mesh.size,
      jax.default_backend(),
  )
  step = jax.jit(
      data_parallel_step(spec, tx, mesh, options.microbatches, labels),
      donate_argnums=0,
      **options.jit,
  )
  rows = NamedSharding(mesh, P("batch"))
  copies = NamedSharding(mesh, P())
  return (
      step,
      lambda s: jax.device_put(s, copies),
      lambda b: jax.device_put(b, rows),
  )


def batch_mesh() -> Mesh:
  """This process's devices as a mesh with one axis, 'batch'."""
  return Mesh(np.array(jax.local_devices()), ("batch",))
