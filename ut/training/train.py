"""Training fixed UTs: only E and U move (DESIGN §7).

`train_and_evaluate(config, workdir)` trains, evaluates on held-out data from a
disjoint seed stream, writes metrics (TensorBoard events, CSV, JSON) and orbax
checkpoints, and resumes from the latest checkpoint in the workdir. Batches are
a pure function of (seed, step), so a resumed run is bit-identical to an
uninterrupted one.
"""

import dataclasses
import functools
import json
import os
import time

from absl import logging
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp

from ut.cpu import forward as cpu_forward
from ut.cpu import host
from ut.errors import UserError
from ut.io import reports
from ut.training import data as data_lib
from ut.training import models
from ut.training import precision as precision_lib


class TrainingDiverged(UserError):
  """The loss became NaN or inf."""


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: dict
  opt_state: optax.OptState


def model_spec(config, task_info):
  """The ModelSpec of a config (its `model` block plus the task's sizes)."""
  mc = config.model
  return models.ModelSpec(
      kind=mc.kind,
      variant=mc.variant,
      vocab_size=task_info.vocab_size,
      max_len=task_info.max_len,
      num_classes=task_info.num_classes,
      num_heads=mc.num_heads,
      num_layers=mc.num_layers,
      width=mc.width,
      m=mc.m,
      head_width=mc.head_width,
      mlp_ratio=mc.mlp_ratio,
      mlp_width=mc.get("mlp_width", 0),
      causal=mc.causal,
      ut_seed=mc.ut_seed,
      shared=mc.shared,
      embed_scale=mc.get("embed_scale", 1.0),
      impl=mc.get("impl", "auto"),
      last_only=task_info.labels_last_only,
      left_pad=task_info.left_pad,
  )


SCHEDULES = ("cosine", "constant")


def lr_schedule(tc, peak_lr):
  """peak_lr times a linear warmup from 0, then per tc.schedule: "cosine"
  decays to final_lr_frac at tc.steps; "constant" stays at the peak, so that a
  run can leave a loss plateau late (with early stopping, `stop_reason`)."""
  schedule = tc.get("schedule", "cosine")
  if schedule == "constant":
    shape = optax.warmup_constant_schedule(0.0, 1.0, tc.warmup_steps)
  else:
    shape = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=1.0,
        warmup_steps=tc.warmup_steps,
        decay_steps=max(tc.steps, tc.warmup_steps + 1),
        end_value=tc.final_lr_frac,
    )
  return lambda step: peak_lr * shape(step)


def stop_reason(tc, curve):
  """Why a run whose held-out accuracy curve is `curve` ([(step, accuracy)],
  one entry per evaluation) stops now, or None to go on.

  tc.stop_accuracy > 0: stop once the accuracy is at least that at
  tc.stop_evals evaluations in a row. tc.plateau_evals > 0: stop once the
  best accuracy of the last plateau_evals evaluations is not above the best
  before them by more than tc.plateau_delta (the curve has flattened).
  """
  accs = [a for _, a in curve]
  target, n = tc.get("stop_accuracy", 0.0), tc.get("stop_evals", 2)
  if target > 0 and len(accs) >= n and min(accs[-n:]) >= target:
    return f"accuracy >= {target} at {n} evaluations in a row"
  window = tc.get("plateau_evals", 0)
  if window > 0 and len(accs) > window:
    before, recent = max(accs[:-window]), max(accs[-window:])
    if recent <= before + tc.get("plateau_delta", 0.0):
      return (
          f"plateau: best accuracy of the last {window} evaluations "
          f"{recent:.4f}, best before {before:.4f}"
      )
  return None


# The leaves AdamW's weight decay applies to: every trained leaf, or its
# weights only (`models.decay_mask`: no biases, no LayerNorm parameters).
DECAY_ON = ("all", "weights")


def make_optimizer(config, params, spec, peak_lr=None):
  """AdamW on warmup + cosine for 'train' leaves, zero updates for 'frozen';
  b2 = config.train.adam_b2 (0.98 where absent), weight decay on the leaves
  config.train.decay_on names.

  The peak learning rate lives in the optimizer state (optax.inject_hyperparams),
  so runs that differ only in it can be vmapped (ut/experiments/sweep.py). peak_lr defaults
  to config.train.lr and may be a traced value.
  """
  tc = config.train
  decay_on = tc.get("decay_on", "all")
  if decay_on not in DECAY_ON:
    raise UserError(
        f"config.train.decay_on={decay_on!r}; use one of {DECAY_ON} (the "
        "leaves weight decay applies to)"
    )
  mask = None if decay_on == "all" else models.decay_mask

  def inner(peak_lr):
    return optax.chain(
        optax.clip_by_global_norm(tc.grad_clip),
        optax.adamw(
            lr_schedule(tc, peak_lr),
            b1=0.9,
            b2=tc.get("adam_b2", 0.98),
            weight_decay=tc.weight_decay,
            mask=mask,
        ),
    )

  peak_lr = tc.lr if peak_lr is None else peak_lr
  tx = optax.multi_transform(
      {
          "train": optax.inject_hyperparams(inner)(peak_lr=peak_lr),
          "frozen": optax.set_to_zero(),
      },
      models.labels(params, spec),
  )
  return tx, lr_schedule(tc, tc.lr)


def loss_and_metrics(params, spec, batch, mean=True):
  """Cross-entropy over the labelled positions, and the step's metrics.

  mean=False returns the sum instead of the mean, and the number of labelled
  positions as metrics['labelled'] (microbatches are added up in `train_step`).
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


def _stop_frozen_gradients(params, spec):
  """Frozen leaves get stop_gradient: XLA then skips their weight gradients."""
  return jax.tree.map(
      lambda p, label: jax.lax.stop_gradient(p) if label == "frozen" else p,
      params,
      models.labels(params, spec),
  )


def cpu_threads(config):
  """XLA CPU's thread pool for this run (`ut.cpu.host.start_backend`), told
  before JAX starts: 1 where the step takes its batch one string at a time
  (its microbatches equal the batch, as at Zhong & Andreas's Dyck size: there
  a second thread splits ops too small to share and slowed the step); None,
  XLA's pool of one thread per core, otherwise (k-hop's whole-batch steps ran
  faster on two cores). Measured by `python -m benchmarks.peer_bench
  --startup=compare` (docs/performance.md)."""
  task = data_lib.make_task(config)
  spec = model_spec(config, task.info)
  if spec.impl == "auto":  # On CPU: the launchers ask only there.
    spec = dataclasses.replace(spec, impl="xla_cpu")
  batch, tokens = train_batch(config, task, 0)["tokens"].shape
  parts = step_microbatches(config) or default_microbatches(
      batch, tokens, spec, on_cpu=True
  )
  return 1 if parts >= batch > 1 else None


def default_microbatches(
    batch_size, num_tokens, spec, m_wide=False, on_cpu=None
):
  """How many microbatches `train_step` splits a (batch_size, num_tokens) batch
  into by default: `ut.cpu.host.microbatches`, cache-sized parts on CPU and
  the whole batch elsewhere. A token's activations are the model width wide,
  plus the MLP's hidden width with res_ln_mlp; the rule adds each string's
  attention scores and picks the budget by kind (and m for a random UT).
  The random UT's coefficient form (`ut.cpu.forward.coefficient_form`, whose
  per-string cost does not grow with m) takes the batch whole: 1 part was
  its fastest of 1, 4 and 16 on Dyck at m = 256 and 512
  (benchmarks/last_only_bench.py). So does the form with res_ln
  (`ut.cpu.forward.residual_coefficient_form`), whose tables each part
  would pay again. m_wide=True: the count for the M-wide
  order even there (`ut.cpu.forward.apply_m_wide`, a benchmark's baseline).
  on_cpu: whether JAX runs on its CPU (None: ask JAX, starting its backend)."""
  on_cpu = host.on_cpu() if on_cpu is None else on_cpu
  if (
      not m_wide
      and on_cpu
      and models.resolve_impl(spec.impl) == "xla_cpu"
      and (
          cpu_forward.coefficient_form(spec, num_tokens)
          or cpu_forward.residual_coefficient_form(
              spec, batch_size, num_tokens, spec.last_only
          )
      )
  ):
    return 1
  width = spec.model_width + (
      spec.mlp_hidden_width if spec.variant == "res_ln_mlp" else 0
  )
  return host.microbatches(
      batch_size,
      num_tokens,
      kind=spec.kind,
      width=width,
      num_heads=spec.num_heads,
      m=spec.model_width,
      cpu=on_cpu,
  )


def step_microbatches(config):
  """The training step's microbatches: config.cpu.microbatches (configs/cpu.py)
  as a number, or None for `default_microbatches` ("auto", or no `cpu`
  section). A UserError unless it is "auto" or a positive integer."""
  cpu = config.get("cpu")
  value = "auto" if cpu is None else cpu.get("microbatches", "auto")
  if value == "auto":
    return None
  if not str(value).isdigit() or int(value) < 1:
    raise UserError(
        f"config.cpu.microbatches={value!r}; use auto or a "
        f"positive integer that divides the batch, e.g. 1"
    )
  return int(value)


def _split(batch, n):
  """Every (B, ...) array of the batch as (n, B / n, ...): n microbatches."""
  return jax.tree.map(
      lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:]), batch
  )


def _forward_params(params, spec, layers):
  """What the forward reads: params with frozen gradients stopped, and with
  `layers` (`models.split_frozen`'s) in place of params['layers'] if given."""
  params = _stop_frozen_gradients(params, spec)
  return params if layers is None else dict(params, layers=layers)


def train_step(state, batch, *, spec, tx, microbatches=None, layers=None):
  """One optimizer step; returns the new state and the step's metrics.

  With microbatches > 1 the batch is split into that many equal parts whose
  loss sums and gradients a `lax.scan` adds up: the same step up to float
  rounding, in less memory. None: `default_microbatches`. layers: the frozen
  layers as `models.split_frozen` splits them, which the forward reads in
  place of state.params['layers'] (the same values; `make_step` passes them).
  """
  b, t = batch["tokens"].shape
  n = microbatches or default_microbatches(b, t, spec)
  if b % n:
    raise ValueError(f"microbatches={n} does not divide the batch size {b}")
  if n == 1:
    grad_fn = jax.value_and_grad(
        lambda p: loss_and_metrics(
            _forward_params(p, spec, layers), spec, batch
        ),
        has_aux=True,
    )
    (_, metrics), grads = grad_fn(state.params)
    return apply_gradients(state, grads, metrics, tx)
  return apply_gradient_sums(
      state,
      grad_sums(state.params, batch, spec=spec, microbatches=n, layers=layers),
      tx,
  )


def grad_sums(params, batch, *, spec, microbatches, layers=None):
  """((cross-entropy sum, metrics), its gradient) over the batch, summed over
  `microbatches` equal parts by a `lax.scan`; metrics['labelled'] counts the
  labelled positions. Sums add up across parts, and across devices. layers:
  as in `train_step`."""
  grad_fn = jax.value_and_grad(
      lambda p, part: loss_and_metrics(
          _forward_params(p, spec, layers), spec, part, mean=False
      ),
      has_aux=True,
  )
  parts = _split(batch, microbatches)
  zeros = jax.tree.map(
      lambda a: jnp.zeros(a.shape, a.dtype),
      jax.eval_shape(grad_fn, params, jax.tree.map(lambda a: a[0], parts)),
  )
  add = lambda total, part: (
      jax.tree.map(jnp.add, total, grad_fn(params, part)),
      None,
  )
  return jax.lax.scan(add, zeros, parts)[0]


def data_parallel_step(spec, tx, mesh, microbatches=None):
  """`train_step` with the batch split over the devices of `mesh` (axis
  'batch'): each device sums its share's gradients (`grad_sums`, in
  `microbatches` parts; None: `default_microbatches` of its share), the sums
  are added across devices, and every device applies the same update to its
  copy of the state. The same step as `train_step` up to the order of float
  additions."""

  def local(params, batch):
    n = microbatches or default_microbatches(*batch["tokens"].shape, spec)
    return grad_sums(params, batch, spec=spec, microbatches=n)

  sums = _summed_over_shares(local, mesh)
  return lambda state, batch: apply_gradient_sums(
      state, sums(state.params, batch), tx
  )


def _summed_over_shares(local, mesh):
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


def compiler_options(config):
  """`jax.jit` keyword arguments for the training step: those of the `cpu`
  section (configs/cpu.py; `ut.cpu.host.compiler_options`), and none without
  that section."""
  return host.compiler_options(config.get("cpu"))


# Config fields that count steps or examples, and the least value that works.
_AT_LEAST = {
    "train.steps": 1,
    "train.batch_size": 1,
    "train.log_every": 1,
    "train.checkpoint_every": 1,
    "train.warmup_steps": 0,
    "eval.every": 1,
    "eval.num": 1,
    "eval.batch_size": 1,
}


def check_schedule(config):
  """A UserError naming the first step, size or lr field that cannot work."""
  for dotted, least in _AT_LEAST.items():
    section, field = dotted.split(".")
    value = config[section][field]
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
      raise UserError(f"config.{dotted}={value!r}; use an integer >= {least}")
  lr = config.train.lr
  if (
      isinstance(lr, bool)
      or not isinstance(lr, (int, float))
      or not 0 < lr < np.inf
  ):
    raise UserError(f"config.train.lr={lr!r}; use a positive number, e.g. 1e-3")
  tc = config.train
  if tc.get("schedule", "cosine") not in SCHEDULES:
    raise UserError(
        f"config.train.schedule={tc.schedule!r}; use one of "
        f"{', '.join(SCHEDULES)}"
    )
  for field, least in (("stop_evals", 1), ("plateau_evals", 0)):
    value = tc.get(field, least)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
      raise UserError(
          f"config.train.{field}={value!r}; use an integer >= {least}"
      )
  for field, high in (("stop_accuracy", 1.0), ("plateau_delta", np.inf)):
    value = tc.get(field, 0.0)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= high
    ):
      raise UserError(
          f"config.train.{field}={value!r}; use a number in [0, {high}]"
          f" (0 turns it off)"
      )


def check_data_parallel(config):
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
  parts = step_microbatches(config)
  share = b // n if config.train.data_parallel else b
  if parts is not None and share % parts:
    raise UserError(
        f"config.cpu.microbatches={parts} must divide the "
        f"{share} strings of each step's batch on a device "
        f"(config.train.batch_size={b}); e.g. microbatches=1"
    )


def make_step(config, spec, tx):
  """(jitted step, place_state, place_batch) as `train_and_evaluate` runs them.

  config.train.data_parallel: split each batch over this process's devices
  (`data_parallel_step`; e.g. `launch.train --cpu_devices=2` on a 2-core CPU,
  or several GPUs), the state copied to each. Otherwise `train_step` on one
  device. A `cpu` section (configs/cpu.py, on CPU only) sets the step's XLA
  options (`compiler_options`) and microbatches (`step_microbatches`).
  """
  options = compiler_options(config)
  parts = step_microbatches(config)
  if not config.train.data_parallel:
    cores = (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count() or 1
    )
    if (
        jax.default_backend() == "cpu"
        and jax.local_device_count() == 1
        and cores > 1
    ):
      logging.info(
          "one device on %d cores: `launch.train --cpu_devices=%d` "
          "splits each batch over them (data parallel: 1.17-1.76x "
          "the steps/s on 2 cores, results/bench/dp), and "
          "`launch.sweep --workers=%d` trains that many runs at once",
          cores,
          cores,
          cores,
      )
    step = jax.jit(
        functools.partial(train_step, spec=spec, tx=tx, microbatches=parts),
        donate_argnums=0,
        **options,
    )
    return _SplitLayersStep(step, spec), lambda s: s, lambda b: b
  check_data_parallel(config)
  mesh = batch_mesh()
  logging.info(
      "data parallel: each batch split over %d %s devices",
      mesh.size,
      jax.default_backend(),
  )
  step = jax.jit(
      data_parallel_step(spec, tx, mesh, parts), donate_argnums=0, **options
  )
  rows = NamedSharding(mesh, P("batch"))
  copies = NamedSharding(mesh, P())
  return (
      step,
      lambda s: jax.device_put(s, copies),
      lambda b: jax.device_put(b, rows),
  )


class _SplitLayersStep:
  """A jitted `train_step` that passes it the frozen layers split
  (`models.split_frozen`) where the model reads them so: XLA CPU copies a
  slice of a stacked parameter inside the jit (results/bench/split_bench.md).

  The split is made from the first state and kept for the states this step
  returns: the step never changes the frozen layers (the optimizer zeroes
  their updates). Any other state (a restore, another run's) is split anew.
  """

  def __init__(self, step, spec):
    self._step, self._spec = step, spec
    self._layers = self._t = self._returned = None

  def __call__(self, state, batch):
    t = batch["tokens"].shape[1]
    if not models.splits_layers(self._spec, t):
      return self._step(state, batch)
    wv = state.params["layers"]["wv"]
    if wv is not self._returned or t != self._t:
      self._layers = models.split_frozen(state.params, self._spec, t)["layers"]
      self._t = t
    state, metrics = self._step(state, batch, layers=self._layers)
    self._returned = state.params["layers"]["wv"]
    return state, metrics


def batch_mesh():
  """This process's devices as a mesh with one axis, 'batch'."""
  return Mesh(np.array(jax.local_devices()), ("batch",))


def apply_gradient_sums(state, sums, tx):
  """`apply_gradients` for `grad_sums`' output: the sums over the labelled
  positions divided by their number (metrics['loss'] the mean)."""
  (ce_sum, metrics), grads = sums
  scale = 1.0 / jnp.maximum(metrics.pop("labelled"), 1)
  grads = jax.tree.map(lambda g: g * scale, grads)
  return apply_gradients(state, grads, dict(loss=ce_sum * scale, **metrics), tx)


def apply_gradients(state, grads, metrics, tx):
  """The optimizer update of `train_step`; adds metrics['grad_norm']."""
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics["grad_norm"] = optax.tree.norm(grads)
  return (
      TrainState(step=state.step + 1, params=params, opt_state=opt_state),
      metrics,
  )


@functools.partial(jax.jit, static_argnames=("spec", "microbatches"))
def eval_step(params, batch, *, spec, microbatches=1):
  """The metrics of one batch, computed `microbatches` parts at a time.

  The sums are exact (counts) or equal up to float rounding (the loss); the
  parts keep a forward pass's m-wide state in the caches, as in `train_step`.
  """
  if microbatches == 1:
    return loss_and_metrics(params, spec, batch)[1]
  return _mean_loss(
      eval_sums(params, batch, spec=spec, microbatches=microbatches)
  )


def eval_sums(params, batch, *, spec, microbatches):
  """(cross-entropy sum, metrics with 'labelled') of one batch, in parts."""
  sums = jax.lax.map(
      lambda part: loss_and_metrics(params, spec, part, mean=False),
      _split(batch, microbatches),
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
  (axis 'batch') as in `data_parallel_step`: each device sums its share's
  metrics and the sums are added across devices."""

  def local(params, batch):
    n = default_microbatches(*batch["tokens"].shape, spec)
    return eval_sums(params, batch, spec=spec, microbatches=n)

  sums = _summed_over_shares(local, mesh)
  return jax.jit(lambda params, batch: _mean_loss(sums(params, batch)))


def held_out_metrics(params, spec, eval_batches, mesh=None):
  """Accuracy and mean loss over a list of batches (`default_microbatches`
  parts of each at a time). With a mesh (axis 'batch'), each batch whose size
  its devices divide is split over them (`data_parallel_eval_step`)."""
  correct = count = 0
  loss_sum = 0.0
  # Tokens per string -> params with split layers (`make_step`); a copy of
  # the frozen maps per call, beside the held-out set's many forwards.
  split = {}
  for batch in eval_batches:
    t = batch["tokens"].shape[1]
    if mesh is None and t not in split:
      split[t] = models.split_frozen(params, spec, t)
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
              microbatches=(default_microbatches(*batch["tokens"].shape, spec)),
          )
      )
    correct += int(m["correct"])
    count += int(m["count"])
    loss_sum += float(m["loss"]) * len(batch["tokens"])
  n = sum(len(b["tokens"]) for b in eval_batches)
  return dict(accuracy=correct / max(count, 1), loss=loss_sum / max(n, 1))


def evaluation(params, spec, valid, test=None, mesh=None):
  """`held_out_metrics` on the validation batches; with test batches
  (config.eval.test_each), the test set's as test_accuracy and test_loss."""
  out = held_out_metrics(params, spec, valid, mesh)
  if test is not None:
    scored = held_out_metrics(params, spec, test, mesh)
    out.update(test_accuracy=scored["accuracy"], test_loss=scored["loss"])
  return out


def test_batches(config, task):
  """The test batches scored at every evaluation, or None
  (config.eval.test_each)."""
  if not config.eval.get("test_each", False):
    return None
  return eval_batches(config, task, "test")


def eval_batches(config, task, split="valid"):
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


def train_batch(config, task, step):
  return task.batch(
      config.train.batch_size, data_lib.stream_seed(config.seed, 0, step)
  )


# Config fields added after runs were recorded: their value in older runs.
_ADDED_FIELDS = {
    "model.mlp_width": 0,
    "model.embed_scale": 1.0,
    "model.impl": "auto",
    "train.data_parallel": False,
    "train.schedule": "cosine",
    "train.stop_accuracy": 0.0,
    "train.stop_evals": 2,
    "train.plateau_evals": 0,
    "train.plateau_delta": 0.0,
    "train.init_params": "",
    "eval.test_each": False,
    # Runs before the field: JAX's default, which on CPU is full float32
    # (bit-identical to "highest", tests/precision_test.py).
    "precision": "highest",
}
# Fields that older runs recorded and that are gone since (moved to the CPU
# overlay, configs/cpu.py).
_REMOVED_FIELDS = ("train.ynn_fusions",)
# Sections of host settings (configs/cpu.py), not of the run: a run resumes,
# or is evaluated, on any host.
HOST_SECTIONS = ("cpu",)


def stored_config(config_dict):
  """A config read back from a run's JSON in today's form: fields added since
  filled in, fields removed since dropped, and without the host settings
  (HOST_SECTIONS)."""
  out = json.loads(json.dumps(config_dict))
  for section in HOST_SECTIONS:
    out.pop(section, None)
  for dotted in _REMOVED_FIELDS:
    node, leaf = _parent(out, dotted)
    if isinstance(node, dict):
      node.pop(leaf, None)
  for dotted, value in _ADDED_FIELDS.items():
    node, leaf = _parent(out, dotted)
    if isinstance(node, dict):
      node.setdefault(leaf, value)
  return out


def _refuse_old_sparse_order(raw, workdir):
  """A sparse run recorded without model.impl was saved in the block order
  before the one of `sparse.block_names` (level, string, role): its E and U
  would be read in the wrong order, so it cannot be resumed or evaluated."""
  model = raw.get("model", {})
  if model.get("kind") == "sparse" and "impl" not in model:
    raise UserError(
        f"{workdir} holds a sparse-UT run saved in the block order "
        f"used before the redesign (its config has no model.impl); "
        f"retrain it in a new --workdir"
    )


def _parent(tree, dotted):
  """(the dict that holds field `dotted` of a nested dict, or None; its key)."""
  *parents, leaf = dotted.split(".")
  for p in parents:
    tree = tree.get(p) if isinstance(tree, dict) else None
  return tree, leaf


def config_diff(a, b, prefix=""):
  """Dotted names of the fields where two config dicts differ."""
  out = []
  for key in sorted(set(a) | set(b)):
    x, y = a.get(key), b.get(key)
    if isinstance(x, dict) and isinstance(y, dict):
      out += config_diff(x, y, f"{prefix}{key}.")
    elif x != y:
      out.append(prefix + key)
  return out


def _check_workdir_config(config, workdir):
  """Writes config.json, or checks that a resumed run has the same config."""
  path = os.path.join(workdir, "config.json")
  current = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path) as f:
      raw = json.load(f)
    _refuse_old_sparse_order(raw, workdir)
    stored = stored_config(raw)
    run = stored_config(current)  # Host settings may differ.
    if stored != run:
      raise UserError(
          f"workdir {workdir} holds a run with a different config "
          f"(differs in {', '.join(config_diff(stored, run))}); "
          f"use a new --workdir to start afresh, or the same config "
          f"to resume"
      )
  else:
    # Always recorded, so that a run's block order can be told later
    # (`_refuse_old_sparse_order`), even from a config built by hand.
    current.setdefault("model", {}).setdefault("impl", "auto")
    reports.write_json(path, current)


def load_config(workdir):
  """The ConfigDict a workdir was trained with."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise UserError(
        f"{workdir} has no config.json: is it a training workdir "
        f"(python -m launch.train --workdir=...)?"
    )
  with open(path) as f:
    raw = json.load(f)
  _refuse_old_sparse_order(raw, workdir)
  return ml_collections.ConfigDict(stored_config(raw))


def checkpoint_manager(workdir, max_to_keep=2, single_item=True):
  """A run's checkpoints (one pytree a step: `checkpointed`); a group's
  (ut/experiments/sweep.py) save several items, single_item=False."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      options=ocp.CheckpointManagerOptions(
          max_to_keep=max_to_keep, create=True
      ),
      # Known up front, so that a fresh manager reads a step's metadata.
      item_handlers=ocp.StandardCheckpointHandler() if single_item else None,
  )


def trainable_leaves(params, labels):
  """The leaves of params labelled "train" (`models.labels`), in tree order:
  what a checkpoint keeps (the frozen ones come back from `models.init`)."""
  leaves = jax.tree.leaves(params)
  return [p for p, l in zip(leaves, jax.tree.leaves(labels)) if l == "train"]


def with_trainable(params, labels, trainable):
  """params with its "train" leaves replaced, in tree order, by trainable."""
  leaves, treedef = jax.tree.flatten(params)
  saved = iter(trainable)
  return treedef.unflatten(
      [
          next(saved) if l == "train" else p
          for p, l in zip(leaves, jax.tree.leaves(labels))
      ]
  )


def checkpointed(state, labels):
  """What a checkpoint holds of a (possibly stacked) TrainState: no frozen
  leaf. The frozen weights are a function of the config (`models.init` draws
  them from the seeds), so a restore takes them from the initial state
  (`check_frozen` checks that they are the same); a random UT's m x m maps
  would otherwise be most of every checkpoint."""
  return dict(
      step=state.step,
      trainable=trainable_leaves(state.params, labels),
      opt_state=state.opt_state,
  )


def from_checkpointed(state, labels, saved):
  """state (the initial one) with `checkpointed`'s restored leaves in place."""
  return state.replace(
      step=saved["step"],
      params=with_trainable(state.params, labels, saved["trainable"]),
      opt_state=saved["opt_state"],
  )


FROZEN_SUMS = "frozen_sums.json"


def check_frozen(path, params, labels):
  """Guards `checkpointed`'s premise, that the config draws the same frozen
  weights on every resume: writes the float64 sum of each frozen leaf to
  path (JSON) where it is missing, else compares them (relative 1e-6: a
  different draw, not last-bit noise) and raises a UserError if the code or
  the JAX version that draws them has changed since the run began."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  sums = {
      _path_key(p): float(np.asarray(leaf).sum(dtype=np.float64))
      for (p, leaf), label in zip(flat, jax.tree.leaves(labels))
      if label == "frozen"
  }
  if not os.path.exists(path):
    reports.write_json(path, sums)
    return
  with open(path) as f:
    saved = json.load(f)
  for name in sorted(set(saved) | set(sums)):
    got, want = sums.get(name), saved.get(name)
    if got is None or want is None or not np.isclose(got, want, rtol=1e-6):
      raise UserError(
          f"{path}: the frozen leaf {name} this config draws now (sum "
          f"{got}) is not the one the run was trained with (sum {want}): the "
          "code or JAX version that draws it changed; train again in a new "
          "folder"
      )


def restore_checkpoint(mngr, step, state, spec):
  """One run's TrainState at a checkpointed step; state is its initial one,
  whose frozen leaves it keeps. Reads checkpoints that hold the whole state
  too (written before checkpoints dropped the frozen leaves)."""
  if "params" in mngr.item_metadata(step).tree:  # The whole state.
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    return mngr.restore(step, args=ocp.args.StandardRestore(abstract))
  labels = models.labels(state.params, spec)
  abstract = jax.tree.map(
      ocp.utils.to_shape_dtype_struct, checkpointed(state, labels)
  )
  saved = mngr.restore(step, args=ocp.args.StandardRestore(abstract))
  return from_checkpointed(state, labels, saved)


def init_state(config, spec, warm_start=True):
  """The step-0 state; warm_start=False skips config.train.init_params (a
  restore only needs the tree's shapes)."""
  params = models.init(jax.random.PRNGKey(config.seed), spec)
  path = config.train.get("init_params", "")
  if path and warm_start:
    params = load_init_params(path, params, spec)
  tx, schedule = make_optimizer(config, params, spec)
  return (
      TrainState(
          step=jnp.asarray(0, jnp.int32),
          params=params,
          opt_state=tx.init(params),
      ),
      tx,
      schedule,
  )


def load_init_params(path, params, spec):
  """params with trainable leaves replaced by the arrays of an .npz file.

  The file's keys are leaf paths joined by '/' ("embed/token",
  "embed/position", "unembed"); leaves it does not name keep their draw.
  A warm start, e.g. from a compiled program (ut/experiments/learnability.py).
  """
  if not os.path.isfile(path):
    raise UserError(
        f"config.train.init_params={path!r} is not a file; give an .npz "
        f"of trainable leaves (e.g. embed/token), or '' for a random start"
    )
  try:
    with np.load(path) as f:
      arrays = {k: f[k] for k in f.files}
  except (OSError, ValueError) as e:
    raise UserError(
        f"config.train.init_params={path!r} is not a readable .npz file "
        f"({type(e).__name__})"
    ) from None
  leaves = _by_path(params)
  labels = _by_path(models.labels(params, spec))
  trainable = sorted(k for k, v in labels.items() if v == "train")
  for key, value in arrays.items():
    if key not in trainable:
      raise UserError(
          f"{path}: {key!r} is not a trainable leaf of this model; use "
          f"{', '.join(trainable)}"
      )
    if value.shape != leaves[key].shape:
      raise UserError(
          f"{path}: {key} has shape {value.shape}; this model's is "
          f"{tuple(leaves[key].shape)}"
      )
    if not np.issubdtype(value.dtype, np.floating) or not np.all(
        np.isfinite(value)
    ):
      raise UserError(
          f"{path}: {key} must hold finite floats (got {value.dtype})"
      )

  def pick(path_, leaf):
    key = _path_key(path_)
    return jnp.asarray(arrays[key], leaf.dtype) if key in arrays else leaf

  return jax.tree_util.tree_map_with_path(pick, params)


def _path_key(path):
  return "/".join(str(k.key) for k in path)


def _by_path(tree):
  """{"embed/token": leaf, ...} of a nested dict."""
  return {
      _path_key(p): leaf
      for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
  }


def restore_params(workdir):
  """(params, spec, config, task, step) from the latest checkpoint of a workdir."""
  config = load_config(workdir)
  task = data_lib.make_task(config)
  spec = model_spec(config, task.info)
  state, _, _ = init_state(config, spec, warm_start=False)
  mngr = checkpoint_manager(workdir)
  step = mngr.latest_step()
  if step is None:
    raise UserError(f"{workdir} has no checkpoint yet")
  state = restore_checkpoint(mngr, step, state, spec)
  mngr.close()
  return state.params, spec, config, task, int(step)


class _CsvLog:
  """Appends metric rows; on resume keeps only rows up to the restored step."""

  def __init__(self, path, keep_through_step):
    self.path = path
    rows = []
    if os.path.exists(path):
      with open(path) as f:
        header, *lines = f.read().splitlines()
      rows = [l for l in lines if int(l.split(",")[0]) <= keep_through_step]
      with open(path, "w") as f:
        f.write("\n".join([header] + rows) + "\n")
    self.header_written = os.path.exists(path)
    self.rows = [dict(zip(header.split(","), r.split(","))) for r in rows]
    # The loss of the last kept row (for a resume with no steps left to run).
    self.last_loss = float(self.rows[-1]["loss"]) if self.rows else None

  def curve(self, column="accuracy"):
    """[(step, value of column)] of the kept rows that have it (an eval log's
    held-out curve; column="test_accuracy": its test curve, or [])."""
    return [
        (int(r["step"]), float(r[column])) for r in self.rows if r.get(column)
    ]

  def write(self, row):
    with open(self.path, "a") as f:
      if not self.header_written:
        f.write(",".join(row) + "\n")
        self.header_written = True
      f.write(",".join(_fmt(v) for v in row.values()) + "\n")


def _fmt(v):
  return repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)


def train_and_evaluate(config, workdir):
  """Trains config.model on config.task; returns the final metrics dict.
  Every step runs at config.precision (ut.training.precision)."""
  with precision_lib.scope(config):
    return _train_and_evaluate(config, workdir)


def _train_and_evaluate(config, workdir):
  task = data_lib.make_task(config)
  spec = model_spec(config, task.info)  # Validate before claiming the workdir.
  check_schedule(config)
  check_data_parallel(config)
  state, tx, _ = init_state(config, spec)  # Reads config.train.init_params.
  reports.check_folder(workdir, "--workdir")
  os.makedirs(workdir, exist_ok=True)
  _check_workdir_config(config, workdir)
  logging.info(
      "model %s/%s width %d: %d trainable of %d parameters",
      spec.kind,
      spec.variant,
      spec.model_width,
      trainable_count(state.params, spec),
      sum(int(np.prod(p.shape)) for p in jax.tree.leaves(state.params)),
  )
  mngr = checkpoint_manager(workdir)
  start_step = mngr.latest_step() or 0
  if start_step:
    state = restore_checkpoint(mngr, start_step, state, spec)
    logging.info("resumed from checkpoint at step %d", start_step)
  labels = models.labels(state.params, spec)
  try:  # Before the logs drop their rows past the checkpoint.
    check_frozen(os.path.join(workdir, FROZEN_SUMS), state.params, labels)
  except UserError:
    mngr.close()
    raise
  train_log = _CsvLog(os.path.join(workdir, "train_metrics.csv"), start_step)
  eval_log = _CsvLog(os.path.join(workdir, "eval_metrics.csv"), start_step)
  writer = _summary_writer(workdir)
  step_fn, place_state, place_batch = make_step(config, spec, tx)
  held_out = eval_batches(config, task)
  tested = test_batches(config, task)
  eval_mesh = batch_mesh() if config.train.data_parallel else None

  def on_log(_, row):
    train_log.write(row)
    _scalars(writer, "train", row)

  def on_eval(_, step, metrics):
    eval_log.write(dict(step=step, **metrics))
    _scalars(writer, "eval", dict(step=step, **metrics))

  try:  # Finish an in-flight async save and close the log even on errors.
    result = train_loop(
        place_state(state),
        step_fn,
        lambda step: place_batch(train_batch(config, task, step)),
        [config],
        evaluate=lambda state, runs: {
            0: evaluation(state.params, spec, held_out, tested, eval_mesh)
        },
        start_step=start_step,
        last_loss=[train_log.last_loss],
        curves={0: eval_log.curve()},
        test_curves={0: eval_log.curve("test_accuracy")},
        on_log=on_log,
        on_eval=on_eval,
        save=lambda step, state, _: mngr.save(
            step, args=ocp.args.StandardSave(checkpointed(state, labels))
        ),
    )
  finally:
    mngr.wait_until_finished()
    mngr.close()
    if writer is not None:
      writer.close()
  if result.diverged:
    raise TrainingDiverged(result.diverged[0])
  final = dict(
      run_summary(config, spec, result.state.params, result, 0, task),
      provenance=reports.provenance(config),
  )
  reports.write_json(os.path.join(workdir, "metrics.json"), final)
  return final


@dataclasses.dataclass
class LoopResult:
  """What `train_loop` ends with; runs are indices into its `configs`.

  state: the (stacked) TrainState after the last step trained.
  step: the number of steps trained, counted from the first (not the resume).
  last_loss: each run's last finite training loss (None if it had none).
  evals: each run's held-out metrics at its last evaluation.
  diverged: a diagnosis for each run whose loss became NaN or inf.
  curves: each run's held-out accuracy curve, [(step, accuracy)], from the
    first step (a resumed run's curve starts with the one passed in).
  stopped: {run: (step, reason)} for each run that stopped early
    (`stop_reason`); its state is the one passed to on_stop at that step.
  test_curves: each run's test accuracy at each evaluation, [(step,
    accuracy)], where its evaluations score the test set too (else empty).
  """

  state: TrainState
  step: int
  last_loss: list
  evals: dict
  diverged: dict
  curves: dict = dataclasses.field(default_factory=dict)
  stopped: dict = dataclasses.field(default_factory=dict)
  test_curves: dict = dataclasses.field(default_factory=dict)

  def run_step(self, run):
    """The steps run `run` trained: to its early stop, or all of `step`."""
    return self.stopped[run][0] if run in self.stopped else self.step


def divergence(loss, step, last_loss, grad_norm, lr):
  """The diagnosis of a run whose training loss became `loss` at `step`."""
  return (
      f"loss became {loss} at step {step} (last finite loss {last_loss}, "
      f"grad norm {grad_norm:.3g}, lr {lr:.3g}); lower --config.train.lr "
      f"or --config.train.grad_clip, or use a res_ln variant"
  )


def train_loop(
    state,
    step_fn,
    batch_at,
    configs,
    *,
    evaluate,
    start_step=0,
    last_loss=None,
    on_log=None,
    on_eval=None,
    on_stop=None,
    save=None,
    curves=None,
    test_curves=None,
    resumed=None,
    name="",
):
  """The training loop of one run (`train_and_evaluate`) and of a vmapped sweep
  group (`ut.experiments.sweep.train_group`); returns a `LoopResult`.

  Args:
    state: the TrainState, placed on the devices; for R runs trained at once,
      each leaf has a leading axis of R >= len(configs) (runs past the configs
      pad the run axis and are ignored).
    step_fn: the placed (jitted) step, (state, batch) -> (state, metrics):
      `train_step` or a vmap of it, whose metrics every process can read.
    batch_at: step (0-based) -> that step's placed batch (`train_batch`).
    configs: the configs of the runs. They share train.steps,
      train.log_every, train.checkpoint_every and eval.every.
    evaluate: (state, runs) -> {run: `evaluation` of that run}, run over
      the runs still training every eval.every steps and after the last.
    start_step: the step to resume at (a checkpoint's); last_loss: each run's
      last logged loss before it.
    on_log: (run, row) for each run still training, every train.log_every
      steps; the row has step, loss, accuracy, grad_norm, lr, steps_per_sec.
    on_eval: (run, step, metrics) after each evaluation.
    on_stop: (run, step, state) when a run stops early, with the state of
      that step (for a group: take the run's share before training goes on).
    save: (step, state, progress), every train.checkpoint_every steps, after
      the last, and when the last run training stops early; progress is what
      a resumed group needs besides the state, a JSON-safe dict of last_loss,
      curves, test_curves, evals, stopped and diverged (runs keyed by their
      index).
    curves: {run: [(step, accuracy)]}, the held-out curve before start_step
      (a resumed run's, so that early stopping sees all of it); test_curves:
      the same of the test accuracy, for runs whose evaluations score it
      (a metrics dict with test_accuracy).
    resumed: a saved progress's evals, stopped and diverged (runs keyed by
      int): the runs that stopped or diverged before start_step train no
      more and keep that record.
    name: a prefix for the log lines.

  A run whose loss becomes NaN or inf stops counting: its diagnosis goes to
  `diverged`. A run stops early when its config's rule says so after an
  evaluation (`stop_reason`: train.stop_accuracy, train.plateau_evals). The
  loop ends when no run is left training. This is the one place where every
  path through training decides what a run's step, log line, evaluation and
  end are.
  """
  first = configs[0]
  steps, log_every = first.train.steps, first.train.log_every
  eval_every, save_every = first.eval.every, first.train.checkpoint_every
  schedules = [lr_schedule(c.train, c.train.lr) for c in configs]
  last_loss = list(last_loss or [None] * len(configs))
  resumed = resumed or {}
  diverged = dict(resumed.get("diverged", {}))
  evals = dict(resumed.get("evals", {}))
  stopped = dict(resumed.get("stopped", {}))
  curves = {i: list((curves or {}).get(i, [])) for i in range(len(configs))}
  test_curves = {
      i: list((test_curves or {}).get(i, [])) for i in range(len(configs))
  }
  training = [
      i for i in range(len(configs)) if i not in stopped and i not in diverged
  ]
  prefix = f"{name}: " if name else ""
  done, t_last, s_last = start_step, time.perf_counter(), start_step

  def stop_finished(state):
    """Takes the runs whose curve says stop out of `training`."""
    for i in list(training):
      reason = stop_reason(configs[i].train, curves[i])
      if reason:
        stopped[i] = (curves[i][-1][0], reason)
        training.remove(i)
        logging.info(
            "%srun %d (seed %d) stops at step %d: %s",
            prefix,
            i,
            configs[i].seed,
            stopped[i][0],
            reason,
        )
        if on_stop is not None:
          on_stop(i, stopped[i][0], state)

  stop_finished(state)  # A resumed run may have stopped before.
  for step in range(start_step, steps if training else start_step):
    state, metrics = step_fn(state, batch_at(step))
    loss = np.asarray(metrics["loss"]).reshape(-1)
    for i in [i for i in training if not np.isfinite(loss[i])]:
      diverged[i] = divergence(
          float(loss[i]),
          step + 1,
          last_loss[i],
          float(np.asarray(metrics["grad_norm"]).reshape(-1)[i]),
          float(schedules[i](step)),
      )
      training.remove(i)
      if len(configs) > 1:  # One run raises (`train_and_evaluate`).
        logging.warning(
            "%srun %d (seed %d) diverged: %s",
            prefix,
            i,
            configs[i].seed,
            diverged[i],
        )
    if not training:
      break
    for i in training:
      last_loss[i] = float(loss[i])
    done = step + 1
    if done % log_every == 0 or done == steps:
      now = time.perf_counter()
      rate = (done - s_last) / max(now - t_last, 1e-9)
      t_last, s_last = now, done
      values = jax.tree.map(lambda a: np.asarray(a).reshape(-1), metrics)
      rows = {
          i: dict(
              step=done,
              loss=last_loss[i],
              accuracy=float(values["correct"][i])
              / max(int(values["count"][i]), 1),
              grad_norm=float(values["grad_norm"][i]),
              lr=float(schedules[i](step)),
              steps_per_sec=rate,
          )
          for i in training
      }
      for i, row in rows.items():
        if on_log is not None:
          on_log(i, row)
      logging.info(
          "%sstep %d/%d loss %.4f acc %.3f | %.1f steps/s, ETA %.0fs",
          prefix,
          done,
          steps,
          np.mean([r["loss"] for r in rows.values()]),
          np.mean([r["accuracy"] for r in rows.values()]),
          rate,
          (steps - done) / rate,
      )
    if done % eval_every == 0 or done == steps:
      evals.update(_evaluate(evaluate, state, training, done, on_eval, prefix))
      for i in training:
        curves[i].append((done, evals[i]["accuracy"]))
        if "test_accuracy" in evals[i]:
          test_curves[i].append((done, evals[i]["test_accuracy"]))
      stop_finished(state)
    if save is not None and (
        done % save_every == 0 or done == steps or not training
    ):
      progress = dict(
          last_loss=last_loss,
          curves=curves,
          test_curves=test_curves,
          evals=evals,
          stopped=stopped,
          diverged=diverged,
      )
      save(done, state, json.loads(json.dumps(progress, default=float)))
    if not training:
      break
  # Nothing trained here (a finished or stopped run resumed): evaluate the
  # checkpoint.
  unscored = [i for i in range(len(configs)) if i not in diverged | evals]
  if unscored:
    evals.update(_evaluate(evaluate, state, unscored, done, None, prefix))
  return LoopResult(
      state=state,
      step=done,
      last_loss=last_loss,
      evals=evals,
      diverged=diverged,
      curves=curves,
      stopped=stopped,
      test_curves=test_curves,
  )


def _evaluate(evaluate, state, runs, step, on_eval, prefix):
  """evaluate(state, runs), each run's result passed to on_eval and logged."""
  evals = evaluate(state, runs)
  for i, metrics in evals.items():
    if on_eval is not None:
      on_eval(i, step, metrics)
  logging.info(
      "%seval at step %d: accuracy %s loss %s",
      prefix,
      step,
      " ".join(f"{evals[i]['accuracy']:.4f}" for i in runs),
      " ".join(f"{evals[i]['loss']:.4f}" for i in runs),
  )
  return evals


_logits = jax.jit(models.apply, static_argnums=1)


def test_metrics(params, spec, config, task, mesh=None):
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


def trainable_count(params, spec):
  """How many parameters the optimizer updates (those labelled 'train')."""
  return sum(
      int(np.prod(p.shape))
      for p, l in zip(
          jax.tree.leaves(params), jax.tree.leaves(models.labels(params, spec))
      )
      if l == "train"
  )


def run_summary(config, spec, params, result, run, task=None):
  """The final metrics of run `run` of a `LoopResult`, with its `params`;
  with `task`, its fixed test set's too (`test_metrics`).

  step is where the run ended (its early stop, `stop_reason`, or the last
  step); curve its held-out accuracy at each evaluation, and steps_to_99 the
  first evaluated step at which that reached 99% (None if never). Where the
  evaluations scored the test set too (config.eval.test_each), test_curve
  holds its accuracy at each, and test_at_best_valid the step of the first
  evaluation of highest held-out accuracy, that accuracy and the test
  accuracy there: the score of early stopping by validation, beside
  test_accuracy at the end."""
  curve = result.curves.get(run, [])
  test_curve = result.test_curves.get(run, [])
  chosen = {}
  if test_curve:
    best_step, best = max(curve, key=lambda point: point[1])  # The first.
    chosen = dict(
        test_curve=[[s, a] for s, a in test_curve],
        test_at_best_valid=dict(
            step=best_step,
            valid_accuracy=best,
            test_accuracy=dict(test_curve)[best_step],
        ),
    )
  return dict(
      step=result.run_step(run),
      stopped_early=result.stopped.get(run, (None, None))[1],
      steps_to_99=next((s for s, a in curve if a >= 0.99), None),
      curve=[[s, a] for s, a in curve],
      eval_accuracy=result.evals[run]["accuracy"],
      **(test_metrics(params, spec, config, task) if task else {}),
      eval_loss=result.evals[run]["loss"],
      final_train_loss=result.last_loss[run],
      param_checksum=param_checksum(params),
      task=config.task,
      kind=spec.kind,
      variant=spec.variant,
      model_width=spec.model_width,
      trainable_params=trainable_count(params, spec),
      **chosen,
  )


def param_checksum(params):
  """A float64 sum over all parameters: equal runs give equal checksums."""
  return float(
      sum(np.asarray(p, np.float64).sum() for p in jax.tree.leaves(params))
  )


def _summary_writer(workdir):
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  except ImportError:  # pragma: no cover - tensorboardX is a dependency.
    return None
  return SummaryWriter(os.path.join(workdir, "tb"))


def _scalars(writer, prefix, row):
  if writer is None:
    return
  for key, value in row.items():
    if key != "step":
      writer.add_scalar(f"{prefix}/{key}", value, row["step"])
  writer.flush()
