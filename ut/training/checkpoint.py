"""Checkpoints: what a run saves each train.checkpoint_every steps, and its
restore.

A checkpoint holds a TrainState's step, optimizer state and trainable
leaves (`checkpointed`): the frozen weights are a function of the config
(`models.init` draws them from the seeds), so a restore takes them from the
initial state (`init_state`), and `check_frozen` guards that premise.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from ut.errors import UserError
from ut.io import reports
from ut.training import data as data_lib
from ut.training import models
from ut.training import optimizer
from ut.training import records
from ut.training.optimizer import TrainState


def checkpoint_manager(
    workdir: str, max_to_keep: int = 2, single_item: bool = True
) -> ocp.CheckpointManager:
  """A run's checkpoints (one pytree a step: `checkpointed`); a group's
  (ut/experiments/sweep/) save several items, single_item=False."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      options=ocp.CheckpointManagerOptions(
          max_to_keep=max_to_keep, create=True
      ),
      # Known up front, so that a fresh manager reads a step's metadata.
      item_handlers=ocp.StandardCheckpointHandler() if single_item else None,
  )


def trainable_leaves(params: dict, labels: dict) -> list:
  """The leaves of params labelled "train" (`models.labels`), in tree order:
  what a checkpoint keeps (the frozen ones come back from `models.init`)."""
  leaves = jax.tree.leaves(params)
  return [p for p, l in zip(leaves, jax.tree.leaves(labels)) if l == "train"]


def with_trainable(params: dict, labels: dict, trainable: list) -> dict:
  """params with its "train" leaves replaced, in tree order, by trainable."""
  leaves, treedef = jax.tree.flatten(params)
  saved = iter(trainable)
  return treedef.unflatten(
      [
          next(saved) if l == "train" else p
          for p, l in zip(leaves, jax.tree.leaves(labels))
      ]
  )


def checkpointed(state: TrainState, labels: dict) -> dict:
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


def from_checkpointed(
    state: TrainState, labels: dict, saved: dict
) -> TrainState:
  """state (the initial one) with `checkpointed`'s restored leaves in place."""
  return state.replace(
      step=saved["step"],
      params=with_trainable(state.params, labels, saved["trainable"]),
      opt_state=saved["opt_state"],
  )


FROZEN_SUMS = "frozen_sums.json"


def check_frozen(path: str, params: dict, labels: dict) -> None:
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


def restore_checkpoint(
    mngr: ocp.CheckpointManager, step: int, state: TrainState, labels: dict
) -> TrainState:
  """One run's TrainState at a checkpointed step; state is its initial one,
  whose frozen leaves it keeps. UserError if the checkpoint holds another
  tree than `checkpointed` writes (another version of the code wrote it)."""
  abstract = jax.tree.map(
      ocp.utils.to_shape_dtype_struct, checkpointed(state, labels)
  )
  found = sorted(mngr.item_metadata(step).tree)
  if found != sorted(abstract):
    raise UserError(
        f"{mngr.directory}/{step} holds {', '.join(found)}, not the "
        f"{', '.join(sorted(abstract))} of this code's checkpoints; train "
        "again in a new --workdir"
    )
  saved = mngr.restore(step, args=ocp.args.StandardRestore(abstract))
  return from_checkpointed(state, labels, saved)


def init_state(
    config, spec, warm_start: bool = True, labels: dict | None = None
):
  """(the step-0 TrainState, its optimizer, config.train.lr's schedule);
  warm_start=False skips config.train.init_params (a restore only needs the
  tree's shapes). labels: `models.labels` of the model's params, where the
  caller has them."""
  params = models.init(jax.random.PRNGKey(config.seed), spec)
  labels = models.labels(params, spec) if labels is None else labels
  path = config.train.get("init_params", "")
  if path and warm_start:
    params = load_init_params(path, params, labels)
  tx, schedule = optimizer.make_optimizer(config, params, spec, labels=labels)
  return (
      TrainState(
          step=jnp.asarray(0, jnp.int32),
          params=params,
          opt_state=tx.init(params),
      ),
      tx,
      schedule,
  )


def load_init_params(path: str, params: dict, labels: dict) -> dict:
  """params with trainable leaves replaced by the arrays of an .npz file.

  The file's keys are leaf paths joined by '/' ("embed/token",
  "embed/position", "unembed"); leaves it does not name keep their draw.
  A warm start, e.g. from a compiled program (ut/experiments/learnability/).
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
  trainable = sorted(k for k, v in _by_path(labels).items() if v == "train")
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


def restore_params(workdir: str):
  """(params, spec, config, task, step) from the latest checkpoint of a workdir."""
  config = records.load_config(workdir)
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  state, _, _ = init_state(config, spec, warm_start=False)
  labels = models.labels(state.params, spec)
  mngr = checkpoint_manager(workdir)
  step = mngr.latest_step()
  if step is None:
    raise UserError(f"{workdir} has no checkpoint yet")
  state = restore_checkpoint(mngr, step, state, labels)
  mngr.close()
  return state.params, spec, config, task, int(step)
