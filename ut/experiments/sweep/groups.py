"""Vmapped groups: the runs of one shape group trained as one program.

Shape glossary: R runs in a group, D devices.

The train step is vmapped over the R runs, and the run axis is sharded over
all devices with a NamedSharding mesh (several CPU devices, a GPU or TPU host
alike). A group and a single run share one loop, step, batch and evaluation
(`ut.training.loop.train_loop`).
"""

import functools
import hashlib
import json
import os
import tempfile

from absl import logging
import jax
from jax.experimental import multihost_utils
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from ut.errors import UserError
from ut.experiments.sweep import records
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out as held_out_lib
from ut.training import implementation
from ut.training import loop
from ut.training import models
from ut.training import optimizer
from ut.training import precision as precision_lib
from ut.training import records as records_lib
from ut.training import step as step_lib


def group_folder(workdir: str, configs: list[ml_collections.ConfigDict]) -> str:
  """Where a vmapped group of these configs keeps its checkpoints: named by
  the configs and the device count (the stacked state's run axis)."""
  key = "\n".join(
      [str(jax.device_count())]
      + [  # Host settings may change on a resume (`records.stored_config`).
          json.dumps(
              records_lib.stored_config(json.loads(c.to_json_best_effort())),
              sort_keys=True,
          )
          for c in configs
      ]
  )
  digest = hashlib.sha256(key.encode()).hexdigest()[:16]
  return os.path.join(workdir, "groups", digest)


def train_group(
    configs: list[ml_collections.ConfigDict], folder: str | None = None
) -> list[dict]:
  """Trains R runs of one shape group at once; returns one metrics dict per run.

  The same loop as one run's (`loop.train_loop`), over a vmap of the same
  `step.train_step`, the same batches (`data.train_batch`) and the same
  evaluation (`held_out.evaluation`). With `folder` (one process only;
  `group_folder`), the group saves its stacked state and its runs' progress
  there every train.checkpoint_every steps and resumes from them, as one run
  does; a run's result is recorded when the group finishes. The runs, not each run's batch, are
  spread over all devices of all processes, padded to a multiple of their
  number: config.train.data_parallel does not apply here (a `cpu` section's
  compiler options do, configs/cpu.py). Every process runs this alike and ends with
  every run's results. Steps run at the group's config.precision."""
  with precision_lib.scope(configs[0]):
    return _train_group(configs, folder)


def _train_group(configs, folder):
  first = configs[0]
  task = data_lib.make_task(first)
  spec = models.model_spec(first, task.info)
  # Auto axes: the sharding is a layout for the compiler, not part of the
  # types (an Explicit "runs" axis fails in the batching of `lax.scan`).
  mesh = jax.make_mesh(
      (jax.device_count(),), ("runs",), axis_types=(AxisType.Auto,)
  )
  runs = list(configs) + [configs[-1]] * (-len(configs) % mesh.size)  # Pad.
  # Each run's own spec: runs of a group may differ in model.ut_seed, which
  # draws the frozen weights (`models.init`); the shapes are the same.
  states = [
      checkpoint.init_state(c, models.model_spec(c, task.info))[0] for c in runs
  ]
  tx, _ = optimizer.make_optimizer(first, states[0].params, spec)
  shard = NamedSharding(mesh, P("runs"))
  labels = models.labels(states[0].params, spec)
  stacked, start_step, progress, mngr = _stack(states), 0, {}, None
  if folder is not None:
    stacked, start_step, progress, mngr = _resume(folder, stacked, labels)
  # A run that stops early keeps that step's params.
  stopped = {i: tuple(v) for i, v in _int_keys(progress.get("stopped")).items()}
  stopped_params = {
      i: _load_stopped(folder, i, states[i].params, labels) for i in stopped
  }

  def on_stop(i, step, state):
    stopped_params[i] = _run(_fetch(state.params), i)
    if folder is not None:
      _save_stopped(folder, i, stopped_params[i], labels)

  try:
    result = loop.train_loop(
        _place(stacked, shard),
        _group_step(first, spec, tx, mesh),
        lambda step: _place(
            _stack([data_lib.train_batch(c, task, step) for c in runs]), shard
        ),
        configs,
        evaluate=_evaluator(configs, task, spec),
        on_stop=on_stop,
        save=_saver(mngr, labels) if mngr is not None else None,
        start_step=start_step,
        **_resumed_progress(progress, stopped),
        name=f"group of {len(configs)} runs on {mesh.size} device(s)",
    )
  finally:
    if mngr is not None:
      mngr.wait_until_finished()
      mngr.close()
  return _summaries(configs, spec, task, result, stopped_params, start_step)


def _group_step(first, spec, tx, mesh):
  """The vmapped, sharded train step; its metrics are copied to every device,
  so that every process reads them all."""
  shard = NamedSharding(mesh, P("runs"))
  return jax.jit(
      jax.vmap(functools.partial(step_lib.train_step, spec=spec, tx=tx)),
      in_shardings=(shard, shard),
      out_shardings=(shard, NamedSharding(mesh, P())),
      donate_argnums=0,
      **implementation.compiler_options(first),
  )


def _evaluator(configs, task, spec):
  """evaluate(state, indices) for `loop.train_loop`: each run's evaluation
  on its own held-out (and test) batches."""
  held_out = [held_out_lib.eval_batches(c, task) for c in configs]
  tested = [held_out_lib.test_batches(c, task) for c in configs]

  def evaluate(state, indices):
    params = _fetch(state.params)
    return {
        i: held_out_lib.evaluation(
            _run(params, i), spec, held_out[i], tested[i]
        )
        for i in indices
    }

  return evaluate


def _saver(mngr, labels):
  """save(step, state, progress) for `loop.train_loop`."""

  def save(step, state, progress):
    mngr.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(checkpoint.checkpointed(state, labels)),
            progress=ocp.args.JsonSave(progress),
        ),
    )

  return save


def _resume(folder, stacked, labels):
  """(stacked, start_step, progress, checkpoint manager) of the group's
  folder: its latest checkpoint, or the initial `stacked` at step 0 with no
  progress where it has none."""
  os.makedirs(folder, exist_ok=True)
  checkpoint.check_frozen(
      os.path.join(folder, checkpoint.FROZEN_SUMS), stacked.params, labels
  )
  mngr = checkpoint.checkpoint_manager(folder, single_item=False)
  try:
    stacked, start_step, progress = _restore_group(
        folder, mngr, stacked, labels
    )
  except (ValueError, KeyError, TypeError, OSError) as e:
    mngr.close()
    raise UserError(
        f"{folder} holds a checkpoint this group cannot resume from "
        f"({type(e).__name__}: {str(e).splitlines()[0][:120]}); remove "
        "that folder to train the group from its start"
    ) from e
  return stacked, start_step, progress or {}, mngr


def _int_keys(d):
  return {int(k): v for k, v in (d or {}).items()}


def _resumed_progress(progress, stopped):
  """The `loop.train_loop` arguments that carry on a resumed group's runs."""

  def curves(key):  # Saved [[step, accuracy]] lists, as tuples.
    return {
        i: [tuple(p) for p in c]
        for i, c in _int_keys(progress.get(key)).items()
    }

  return dict(
      last_loss=progress.get("last_loss"),
      curves=curves("curves"),
      test_curves=curves("test_curves"),
      resumed=dict(
          evals=_int_keys(progress.get("evals")),
          stopped=stopped,
          diverged=_int_keys(progress.get("diverged")),
      ),
  )


def _summaries(configs, spec, task, result, stopped_params, start_step):
  """Each run's metrics dict from the loop's `result`."""
  params = _fetch(result.state.params)
  results = [
      records.diverged(config, result.diverged[i])
      if i in result.diverged
      else loop.run_summary(
          config,
          spec,
          stopped_params.get(i, _run(params, i)),
          result,
          i,
          task,
      )
      for i, config in enumerate(configs)
  ]
  if start_step:  # Its recorded seconds count from here.
    for r in results:
      r["resumed_at_step"] = start_step
  return results


def _stack(trees):
  return jax.tree.map(lambda *a: np.stack(a), *trees)


def _save_stopped(folder, run, params, labels):
  """A stopped run's trained params, kept beside the group's checkpoints."""
  path = os.path.join(folder, f"stopped_{run}.npz")
  with tempfile.NamedTemporaryFile(
      dir=folder, suffix=".npz", delete=False
  ) as f:
    np.savez(
        f, *[np.asarray(x) for x in checkpoint.trainable_leaves(params, labels)]
    )
  os.replace(f.name, path)


def _load_stopped(folder, run, params, labels):
  """The stopped run's params: its initial `params` with the saved leaves."""
  with np.load(os.path.join(folder, f"stopped_{run}.npz")) as z:
    saved = [z[f"arr_{i}"] for i in range(len(z.files))]
  return checkpoint.with_trainable(params, labels, saved)


def _restore_group(folder, mngr, state, labels):
  """(state, start_step, progress) from the group's latest checkpoint, or
  (state, 0, None) where it has none; state is the group's initial stacked
  state, whose frozen leaves the restored one keeps."""
  step = mngr.latest_step()
  if not step:
    return state, 0, None
  abstract = jax.tree.map(
      ocp.utils.to_shape_dtype_struct, checkpoint.checkpointed(state, labels)
  )
  restored = mngr.restore(
      step,
      args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract),
          progress=ocp.args.JsonRestore(),
      ),
  )
  saved = restored.state
  logging.info("group resumed from %s at step %d", folder, step)
  return (
      checkpoint.from_checkpointed(state, labels, saved),
      step,
      restored.progress,
  )


def _place(tree, sharding):
  """Host arrays, the same in every process, as global arrays laid out by
  `sharding`: each process places only its own devices' shards."""
  return jax.tree.map(
      lambda a: jax.make_array_from_callback(
          a.shape, sharding, lambda index: a[index]
      ),
      tree,
  )


def _fetch(tree):
  """Global arrays as host arrays in every process (gathered from the others)."""
  if all(a.is_fully_addressable for a in jax.tree.leaves(tree)):
    return jax.device_get(tree)
  return multihost_utils.process_allgather(tree, tiled=True)


def _run(stacked, i):
  return jax.tree.map(lambda a: a[i], stacked)
