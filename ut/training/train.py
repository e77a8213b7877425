"""Training fixed UTs: only E and U move (DESIGN §7).

`train_and_evaluate(config, workdir)` trains, evaluates on held-out data from a
disjoint seed stream, writes metrics (TensorBoard events, CSV, JSON) and orbax
checkpoints, and resumes from the latest checkpoint in the workdir. Batches are
a pure function of (seed, step), so a resumed run is bit-identical to an
uninterrupted one.
"""

import functools
import json
import os
import time

from absl import logging
import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ut.training import data as data_lib
from ut.training import models
from ut.io import reports
from ut.errors import UserError


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
      kind=mc.kind, variant=mc.variant, vocab_size=task_info.vocab_size,
      max_len=task_info.max_len, num_classes=task_info.num_classes,
      num_heads=mc.num_heads, num_layers=mc.num_layers, width=mc.width, m=mc.m,
      head_width=mc.head_width, mlp_ratio=mc.mlp_ratio,
      mlp_width=mc.get("mlp_width", 0), causal=mc.causal,
      ut_seed=mc.ut_seed, shared=mc.shared,
      embed_scale=mc.get("embed_scale", 1.0))


def lr_schedule(tc, peak_lr):
  """peak_lr times a warmup (from 0) + cosine (to final_lr_frac) shape."""
  shape = optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=1.0, warmup_steps=tc.warmup_steps,
      decay_steps=max(tc.steps, tc.warmup_steps + 1), end_value=tc.final_lr_frac)
  return lambda step: peak_lr * shape(step)


def make_optimizer(config, params, spec, peak_lr=None):
  """AdamW on warmup + cosine for 'train' leaves, zero updates for 'frozen'.

  The peak learning rate lives in the optimizer state (optax.inject_hyperparams),
  so runs that differ only in it can be vmapped (ut/experiments/sweep.py). peak_lr defaults
  to config.train.lr and may be a traced value.
  """
  tc = config.train

  def inner(peak_lr):
    return optax.chain(optax.clip_by_global_norm(tc.grad_clip),
                       optax.adamw(lr_schedule(tc, peak_lr), b1=0.9, b2=0.98,
                                   weight_decay=tc.weight_decay))

  peak_lr = tc.lr if peak_lr is None else peak_lr
  tx = optax.multi_transform(
      {"train": optax.inject_hyperparams(inner)(peak_lr=peak_lr),
       "frozen": optax.set_to_zero()},
      models.labels(params, spec))
  return tx, lr_schedule(tc, tc.lr)


def loss_and_metrics(params, spec, batch, mean=True):
  """Cross-entropy over the labelled positions, and the step's metrics.

  mean=False returns the sum instead of the mean, and the number of labelled
  positions as metrics['labelled'] (microbatches are added up in `train_step`).
  """
  logits = models.apply(params, spec, batch["tokens"])
  labels = batch["labels"]
  valid = labels >= 0
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits, jnp.maximum(labels, 0))
  correct = (jnp.argmax(logits, -1) == labels) & batch["mask"]
  metrics = dict(correct=jnp.sum(correct), count=jnp.sum(batch["mask"]))
  if not mean:
    return jnp.sum(ce * valid), dict(metrics, labelled=jnp.sum(valid))
  loss = jnp.sum(ce * valid) / jnp.maximum(jnp.sum(valid), 1)
  return loss, dict(loss=loss, **metrics)


def _stop_frozen_gradients(params, spec):
  """Frozen leaves get stop_gradient: XLA then skips their weight gradients."""
  return jax.tree.map(lambda p, label: jax.lax.stop_gradient(p)
                      if label == "frozen" else p,
                      params, models.labels(params, spec))


# Activation elements per microbatch on CPU (tokens x (model width + MLP hidden
# width)), by model kind: see `default_microbatches` (measured on one core, as a
# sweep worker runs).
MICROBATCH_ELEMENTS = {"sparse": 2**17, "random": 2**18, "trained": 2**19}


def default_microbatches(batch_size, num_tokens, spec):
  """How many microbatches `train_step` splits a (batch_size, num_tokens) batch into.

  On CPU, about MICROBATCH_ELEMENTS[spec.kind] activation elements each, counted
  as tokens x (model width, plus the MLP's hidden width with res_ln_mlp): the
  largest divisor of the batch size at most batch_size * num_tokens * that
  width / the budget. A microbatch's activations then stay in the caches.
  The sparse kind's step is memory-bound (routing moves the m-wide state with
  little arithmetic) and gains from small parts. Measured with one core per
  process, as `launch.sweep`'s workers run (ms per step, this budget against
  half as many parts): k-hop k = 4 res_ln_mlp (32 x 32 tokens, m = 4000) 160
  against 165 (16 parts against 8), k = 3 res_ln_mlp 60 against 76, Dyck
  res_ln_mlp 42 against 46, Dyck res_ln 7.6 against 9.2; the random UT with
  res_ln_mlp (m = 256, F = 256) 42 against 62 at k-hop k = 4 (2 parts
  against 1), and on Dyck 31 in 4 parts, 32 in 2, 50 in 1. The fixed-size
  benchmark step (random attn, 256 x 64 tokens) runs as fast on 2 cores in 16
  parts as in 8. Elsewhere 1: an accelerator wants the largest matmuls.
  """
  if jax.default_backend() != "cpu":
    return 1
  width = spec.model_width + (spec.mlp_hidden_width
                              if spec.variant == "res_ln_mlp" else 0)
  most = max(1, batch_size * num_tokens * width
             // MICROBATCH_ELEMENTS[spec.kind])
  return max(n for n in range(1, min(most, batch_size) + 1) if batch_size % n == 0)


def _split(batch, n):
  """Every (B, ...) array of the batch as (n, B / n, ...): n microbatches."""
  return jax.tree.map(
      lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:]), batch)


def train_step(state, batch, *, spec, tx, microbatches=None):
  """One optimizer step; returns the new state and the step's metrics.

  With microbatches > 1 the batch is split into that many equal parts whose
  loss sums and gradients a `lax.scan` adds up: the same step up to float
  rounding, in less memory. None: `default_microbatches`.
  """
  b, t = batch["tokens"].shape
  n = microbatches or default_microbatches(b, t, spec)
  if b % n:
    raise ValueError(f"microbatches={n} does not divide the batch size {b}")
  if n == 1:
    grad_fn = jax.value_and_grad(
        lambda p: loss_and_metrics(_stop_frozen_gradients(p, spec), spec, batch),
        has_aux=True)
    (_, metrics), grads = grad_fn(state.params)
    return apply_gradients(state, grads, metrics, tx)
  return apply_gradient_sums(
      state, grad_sums(state.params, batch, spec=spec, microbatches=n), tx)


def grad_sums(params, batch, *, spec, microbatches):
  """((cross-entropy sum, metrics), its gradient) over the batch, summed over
  `microbatches` equal parts by a `lax.scan`; metrics['labelled'] counts the
  labelled positions. Sums add up across parts, and across devices."""
  grad_fn = jax.value_and_grad(
      lambda p, part: loss_and_metrics(_stop_frozen_gradients(p, spec), spec,
                                       part, mean=False), has_aux=True)
  parts = _split(batch, microbatches)
  zeros = jax.tree.map(
      lambda a: jnp.zeros(a.shape, a.dtype),
      jax.eval_shape(grad_fn, params, jax.tree.map(lambda a: a[0], parts)))
  add = lambda total, part: (jax.tree.map(jnp.add, total,
                                          grad_fn(params, part)), None)
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
      state, sums(state.params, batch), tx)


def _summed_over_shares(local, mesh):
  """local(params, batch) with the batch split over the devices of `mesh`
  (axis 'batch'), each device's result added up across them."""
  # check_vma=False: the custom VJPs of `ut.core.transformer` do not annotate how
  # their outputs vary across devices.
  summed = lambda params, batch: jax.lax.psum(local(params, batch), "batch")
  return jax.shard_map(summed, mesh=mesh, in_specs=(P(), P("batch")),
                       out_specs=P(), check_vma=False)


def compiler_options(config):
  """XLA options for the training step: config.train.ynn_fusions=False turns
  off XLA CPU's YNNPACK fusions (XLA's own kernels run every op). On 2 cores,
  data parallel (results/bench/dp): the fixed-size random UT's step ran 1.06x
  as fast without them, two default configs' as fast, nine slower."""
  if config.train.ynn_fusions or jax.default_backend() != "cpu":
    return {}
  return dict(compiler_options=dict(xla_cpu_experimental_ynn_fusion_type=""))


# Config fields that count steps or examples, and the least value that works.
_AT_LEAST = {"train.steps": 1, "train.batch_size": 1, "train.log_every": 1,
             "train.checkpoint_every": 1, "train.warmup_steps": 0,
             "eval.every": 1, "eval.num": 1, "eval.batch_size": 1}


def check_schedule(config):
  """A UserError naming the first step, size or lr field that cannot work."""
  for dotted, least in _AT_LEAST.items():
    section, field = dotted.split(".")
    value = config[section][field]
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
      raise UserError(f"config.{dotted}={value!r}; use an integer >= {least}")
  lr = config.train.lr
  if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < np.inf:
    raise UserError(f"config.train.lr={lr!r}; use a positive number, e.g. 1e-3")


def check_data_parallel(config):
  """A UserError unless config.train.data_parallel can split the batch."""
  n, b = jax.local_device_count(), config.train.batch_size
  if config.train.data_parallel and b % n:
    raise UserError(f"config.train.batch_size={b} must be a multiple of the "
                    f"{n} devices it is split over (config.train.data_parallel)"
                    f"; e.g. batch_size={n * max(1, b // n)}")


def make_step(config, spec, tx):
  """(jitted step, place_state, place_batch) as `train_and_evaluate` runs them.

  config.train.data_parallel: split each batch over this process's devices
  (`data_parallel_step`; e.g. `launch.train --cpu_devices=2` on a 2-core CPU,
  or several GPUs), the state copied to each. Otherwise `train_step` on one
  device.
  """
  options = compiler_options(config)
  if not config.train.data_parallel:
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    if (jax.default_backend() == "cpu" and jax.local_device_count() == 1
        and cores > 1):
      logging.info("one device on %d cores: `launch.train --cpu_devices=%d` "
                   "splits each batch over them (data parallel: 1.17-1.76x "
                   "the steps/s on 2 cores, results/bench/dp), and "
                   "`launch.sweep --workers=%d` trains that many runs at once",
                   cores, cores, cores)
    return (jax.jit(functools.partial(train_step, spec=spec, tx=tx),
                    donate_argnums=0, **options), lambda s: s, lambda b: b)
  check_data_parallel(config)
  mesh = batch_mesh()
  logging.info("data parallel: each batch split over %d %s devices",
               mesh.size, jax.default_backend())
  step = jax.jit(data_parallel_step(spec, tx, mesh), donate_argnums=0,
                 **options)
  rows = NamedSharding(mesh, P("batch"))
  copies = NamedSharding(mesh, P())
  return (step, lambda s: jax.device_put(s, copies),
          lambda b: jax.device_put(b, rows))


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
  return TrainState(step=state.step + 1, params=params,
                    opt_state=opt_state), metrics


@functools.partial(jax.jit, static_argnames=("spec", "microbatches"))
def eval_step(params, batch, *, spec, microbatches=1):
  """The metrics of one batch, computed `microbatches` parts at a time.

  The sums are exact (counts) or equal up to float rounding (the loss); the
  parts keep a forward pass's m-wide state in the caches, as in `train_step`.
  """
  if microbatches == 1:
    return loss_and_metrics(params, spec, batch)[1]
  return _mean_loss(eval_sums(params, batch, spec=spec, microbatches=microbatches))


def eval_sums(params, batch, *, spec, microbatches):
  """(cross-entropy sum, metrics with 'labelled') of one batch, in parts."""
  sums = jax.lax.map(lambda part: loss_and_metrics(params, spec, part,
                                                   mean=False),
                     _split(batch, microbatches))
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
  for batch in eval_batches:
    if mesh is not None and len(batch["tokens"]) % mesh.size == 0:
      m = jax.device_get(data_parallel_eval_step(spec, mesh)(
          params, jax.device_put(batch, NamedSharding(mesh, P("batch")))))
    else:
      m = jax.device_get(eval_step(params, batch, spec=spec, microbatches=(
          default_microbatches(*batch["tokens"].shape, spec))))
    correct += int(m["correct"])
    count += int(m["count"])
    loss_sum += float(m["loss"]) * len(batch["tokens"])
  n = sum(len(b["tokens"]) for b in eval_batches)
  return dict(accuracy=correct / max(count, 1), loss=loss_sum / max(n, 1))


def eval_batches(config, task):
  """The held-out set: config.eval.num examples from the seed stream (seed, 1)."""
  full = task.batch(config.eval.num, data_lib.stream_seed(config.seed, 1))
  bs = config.eval.batch_size
  return [jax.tree.map(lambda a, i=i: a[i:i + bs], full)
          for i in range(0, config.eval.num, bs)]


def train_batch(config, task, step):
  return task.batch(config.train.batch_size,
                    data_lib.stream_seed(config.seed, 0, step))


# Config fields added after runs were recorded: their value in older runs.
_ADDED_FIELDS = {"model.mlp_width": 0, "model.embed_scale": 1.0,
                 "train.data_parallel": False, "train.ynn_fusions": True}


def stored_config(config_dict):
  """A config read back from a run's JSON, with fields added since filled in."""
  out = json.loads(json.dumps(config_dict))
  for dotted, value in _ADDED_FIELDS.items():
    *parents, leaf = dotted.split(".")
    node = out
    for p in parents:
      node = node.get(p) if isinstance(node, dict) else None
    if isinstance(node, dict):
      node.setdefault(leaf, value)
  return out


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
      stored = stored_config(json.load(f))
    if stored != current:
      raise UserError(f"workdir {workdir} holds a run with a different config "
                      f"(differs in {', '.join(config_diff(stored, current))}); "
                      f"use a new --workdir to start afresh, or the same config "
                      f"to resume")
  else:
    reports.write_json(path, current)


def load_config(workdir):
  """The ConfigDict a workdir was trained with."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise UserError(f"{workdir} has no config.json: is it a training workdir "
                    f"(python -m launch.train --workdir=...)?")
  with open(path) as f:
    return ml_collections.ConfigDict(stored_config(json.load(f)))


def checkpoint_manager(workdir, max_to_keep=2):
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))


def init_state(config, spec):
  params = models.init(jax.random.PRNGKey(config.seed), spec)
  tx, schedule = make_optimizer(config, params, spec)
  return TrainState(step=jnp.asarray(0, jnp.int32), params=params,
                    opt_state=tx.init(params)), tx, schedule


def restore_params(workdir):
  """(params, spec, config, task, step) from the latest checkpoint of a workdir."""
  config = load_config(workdir)
  task = data_lib.make_task(config)
  spec = model_spec(config, task.info)
  state, _, _ = init_state(config, spec)
  mngr = checkpoint_manager(workdir)
  step = mngr.latest_step()
  if step is None:
    raise UserError(f"{workdir} has no checkpoint yet")
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  state = mngr.restore(step, args=ocp.args.StandardRestore(abstract))
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
    # The loss of the last kept row (for a resume with no steps left to run).
    self.last_loss = (float(dict(zip(header.split(","), rows[-1].split(",")))["loss"])
                      if rows else None)

  def write(self, row):
    with open(self.path, "a") as f:
      if not self.header_written:
        f.write(",".join(row) + "\n")
        self.header_written = True
      f.write(",".join(_fmt(v) for v in row.values()) + "\n")


def _fmt(v):
  return repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)


def train_and_evaluate(config, workdir):
  """Trains config.model on config.task; returns the final metrics dict."""
  task = data_lib.make_task(config)
  spec = model_spec(config, task.info)  # Validate before claiming the workdir.
  check_schedule(config)
  check_data_parallel(config)
  reports.check_folder(workdir, "--workdir")
  os.makedirs(workdir, exist_ok=True)
  _check_workdir_config(config, workdir)
  state, tx, schedule = init_state(config, spec)
  labels = models.labels(state.params, spec)
  n_train = sum(int(np.prod(p.shape)) for p, l in
                zip(jax.tree.leaves(state.params), jax.tree.leaves(labels))
                if l == "train")
  logging.info("model %s/%s width %d: %d trainable of %d parameters", spec.kind,
               spec.variant, spec.model_width, n_train,
               sum(int(np.prod(p.shape)) for p in jax.tree.leaves(state.params)))
  mngr = checkpoint_manager(workdir)
  start_step = mngr.latest_step() or 0
  if start_step:
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    state = mngr.restore(start_step, args=ocp.args.StandardRestore(abstract))
    logging.info("resumed from checkpoint at step %d", start_step)
  train_log = _CsvLog(os.path.join(workdir, "train_metrics.csv"), start_step)
  eval_log = _CsvLog(os.path.join(workdir, "eval_metrics.csv"), start_step)
  writer = _summary_writer(workdir)
  step_fn, place_state, place_batch = make_step(config, spec, tx)
  state = place_state(state)
  held_out = eval_batches(config, task)
  eval_mesh = batch_mesh() if config.train.data_parallel else None
  tc = config.train
  last_loss, t_last, s_last = None, time.perf_counter(), start_step
  eval_metrics = None
  try:  # Finish an in-flight async save and close the log even on errors.
    for step in range(start_step, tc.steps):
      batch = place_batch(train_batch(config, task, step))
      state, metrics = step_fn(state, batch)
      loss = float(metrics["loss"])
      if not np.isfinite(loss):
        raise TrainingDiverged(
            f"loss became {loss} at step {step + 1} (last finite loss {last_loss}, "
            f"grad norm {float(metrics['grad_norm']):.3g}, lr "
            f"{float(schedule(step)):.3g}); lower --config.train.lr or "
            f"--config.train.grad_clip, or use a res_ln variant")
      last_loss = loss
      done = step + 1
      if done % tc.log_every == 0 or done == tc.steps:
        now = time.perf_counter()
        rate = (done - s_last) / max(now - t_last, 1e-9)
        t_last, s_last = now, done
        row = dict(step=done, loss=loss,
                   accuracy=float(metrics["correct"]) / max(int(metrics["count"]), 1),
                   grad_norm=float(metrics["grad_norm"]), lr=float(schedule(step)),
                   steps_per_sec=rate)
        train_log.write(row)
        _scalars(writer, "train", row)
        logging.info("step %d/%d loss %.4f acc %.3f | %.1f steps/s, ETA %.0fs", done,
                     tc.steps, loss, row["accuracy"], rate, (tc.steps - done) / rate)
      if done % config.eval.every == 0 or done == tc.steps:
        eval_metrics = held_out_metrics(state.params, spec, held_out, eval_mesh)
        eval_log.write(dict(step=done, **eval_metrics))
        _scalars(writer, "eval", dict(step=done, **eval_metrics))
        logging.info("eval at step %d: accuracy %.4f loss %.4f", done,
                     eval_metrics["accuracy"], eval_metrics["loss"])
      if done % tc.checkpoint_every == 0 or done == tc.steps:
        mngr.save(done, args=ocp.args.StandardSave(state))
  finally:
    mngr.wait_until_finished()
    mngr.close()
    if writer is not None:
      writer.close()
  if eval_metrics is None:  # Nothing left to train: evaluate the checkpoint.
    eval_metrics = held_out_metrics(state.params, spec, held_out, eval_mesh)
    last_loss = train_log.last_loss
  final = dict(step=int(state.step), eval_accuracy=eval_metrics["accuracy"],
               eval_loss=eval_metrics["loss"], final_train_loss=last_loss,
               param_checksum=param_checksum(state.params),
               task=config.task, kind=spec.kind, variant=spec.variant,
               model_width=spec.model_width, trainable_params=n_train,
               provenance=reports.provenance(config))
  reports.write_json(os.path.join(workdir, "metrics.json"), final)
  return final


def param_checksum(params):
  """A float64 sum over all parameters: equal runs give equal checksums."""
  return float(sum(np.asarray(p, np.float64).sum() for p in jax.tree.leaves(params)))


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
