"""The optimizer of training: AdamW on a warmup schedule for the 'train'
leaves, zero updates for the 'frozen' ones (STYLE 7), and the update itself.

`make_optimizer` builds it from config.train; `apply_gradients` applies one
step's gradients to a `TrainState`; `check_schedule` names the first step,
size or learning-rate field of a config that cannot work.
"""

from typing import Callable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ut.errors import UserError
from ut.training import models


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: dict
  opt_state: optax.OptState


SCHEDULES = ("cosine", "constant")


def lr_schedule(tc, peak_lr) -> Callable:
  """peak_lr times a linear warmup from 0, then per tc.schedule: "cosine"
  decays to final_lr_frac at tc.steps; "constant" stays at the peak, so that a
  run can leave a loss plateau late (with early stopping, `ut.training.loop.stop_reason`).
  """
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


# The leaves AdamW's weight decay applies to: every trained leaf, or its
# weights only (`models.decay_mask`: no biases, no LayerNorm parameters).
DECAY_ON = ("all", "weights")


def make_optimizer(
    config, params: dict, spec, peak_lr=None, labels: dict | None = None
) -> tuple[optax.GradientTransformation, Callable]:
  """AdamW on warmup + cosine for 'train' leaves, zero updates for 'frozen';
  b2 = config.train.adam_b2 (0.98 where absent), weight decay on the leaves
  config.train.decay_on names. labels: `models.labels(params, spec)` where
  the caller has them. Returns (the optimizer, config.train.lr's schedule).

  The peak learning rate lives in the optimizer state (optax.inject_hyperparams),
  so runs that differ only in it can be vmapped (ut/experiments/sweep/). peak_lr defaults
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
      models.labels(params, spec) if labels is None else labels,
  )
  return tx, lr_schedule(tc, tc.lr)


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


def check_schedule(config) -> None:
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


def apply_gradient_sums(state: TrainState, sums, tx) -> tuple[TrainState, dict]:
  """`apply_gradients` for `step.grad_sums`' output: the sums over the labelled
  positions divided by their number (metrics['loss'] the mean)."""
  (ce_sum, metrics), grads = sums
  scale = 1.0 / jnp.maximum(metrics.pop("labelled"), 1)
  grads = jax.tree.map(lambda g: g * scale, grads)
  return apply_gradients(state, grads, dict(loss=ce_sum * scale, **metrics), tx)


def apply_gradients(
    state: TrainState, grads, metrics: dict, tx
) -> tuple[TrainState, dict]:
  """The optimizer update of `step.train_step`; adds metrics['grad_norm']."""
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics["grad_norm"] = optax.tree.norm(grads)
  return (
      TrainState(step=state.step + 1, params=params, opt_state=opt_state),
      metrics,
  )
