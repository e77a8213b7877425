"""Sweeps: many training runs, batched where they share shapes.

Shape glossary: R runs in a group, D devices, B batch, T tokens.

A config file may define `sweep(add)`; each `add(arg, **overrides)` is one run:
`get_config(arg)` with dotted-field overrides, e.g.

  def sweep(add):
    for seed in range(3):
      add(f"model=random,seed={seed}", **{"train.lr": 1e-2})

Runs whose configs differ only in `seed`, `train.lr` and `model.ut_seed` share
every shape; such a group trains as one program (`train_group`): the train
step is vmapped over runs, and the run axis is sharded over all devices with a
NamedSharding mesh (several CPU devices, a GPU or TPU host alike). A group and
a single run share one loop, step, batch and evaluation
(`ut.training.train.train_loop`). On a single CPU device runs go one after
another by default (`use_vmap`). Each run writes runs/<name>/metrics.json; a
restarted sweep skips runs that have one. The aggregate table has mean ± std
(ddof=1) over seeds.

Multi-host: call `jax.distributed.initialize()` first in every process
(`launch.sweep --distributed`); jax.devices() then spans all hosts and the
mesh shards each group's runs across them. Every process generates the
batches of every run (they are tiny) and places its own devices' share; only
process 0 reads and writes the workdir (it tells the others which runs are
done), so the hosts need not share a filesystem. Compiled-UT runs are left to
a one-process rerun of the same command.
"""

import csv
import functools
import hashlib
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import orbax.checkpoint as ocp

from ut.cpu import workers
from ut.errors import UserError
from ut.io import reports
from ut.training import data as data_lib
from ut.training import models
from ut.training import precision as precision_lib
from ut.training import train
from ut.training import trained_to_ut as compiled

BATCHED_KEYS = ("seed", "train.lr", "model.ut_seed")
# Compiled-UT runs join the group of the model they compile, after it trains.
GROUPED_KEYS = BATCHED_KEYS + ("compiled",)


def load_config_module(path):
  """Imports a config file by path (e.g. configs/dyck_table.py[:arg])."""
  path = path.split(":")[0]
  if not os.path.isfile(path):
    raise UserError(f"config file {path!r} does not exist")
  spec = importlib.util.spec_from_file_location(
      "sweep_config_" + re.sub(r"\W", "_", path), path
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "sweep"):
    raise UserError(
        f"{path} has no sweep(add) function; add one, e.g. "
        f"def sweep(add): add('seed=0'); add('seed=1')"
    )
  return module


def _set(config, dotted, value):
  *parents, leaf = dotted.split(".")
  node = config
  for p in parents:
    if p not in node or not hasattr(node[p], "keys"):
      raise UserError(
          f"sweep override {dotted!r}: no such config field "
          f"(fields here: {', '.join(sorted(node))})"
      )
    node = node[p]
  if leaf not in node:
    raise UserError(
        f"sweep override {dotted!r}: no such config field "
        f"(fields here: {', '.join(sorted(node))})"
    )
  node[leaf] = value


def collect_runs(module, arg=None, workdir=None, overrides=None):
  """[(name, config)] from the module's sweep(add) (or sweep(add, arg)).

  overrides: {dotted field: value} set in every run's config, its name
  unchanged (e.g. {"eval.test_each": True}: `launch.sweep --test_each`).

  add() returns the run's name. A sweep that takes a keyword `finished` is
  passed `finished(name)`: that run's recorded metrics in `workdir` (a dict),
  or None while it is not recorded, so that it can add runs that depend on
  results, e.g. more seeds where the first ones disagree; `run_sweep`
  collects again after a pass that trained something, until no run is added.
  The plan must only grow as results come in. With several JAX processes
  `finished` always says None (every process must plan the same runs).
  """
  runs = []

  def add(arg="", **run_overrides):
    config = module.get_config(arg)
    for key, value in {**run_overrides, **(overrides or {})}.items():
      _set(config, key, value)
    name = re.sub(
        r"[^\w.=-]+",
        "_",
        ",".join(
            [arg] + [f"{k}={v}" for k, v in sorted(run_overrides.items())]
        ),
    ).strip("_,")
    runs.append((name or "default", config))
    return name or "default"

  kwargs = {}
  if "finished" in inspect.signature(module.sweep).parameters:
    kwargs["finished"] = functools.partial(recorded_metrics, workdir)
  if arg is None:
    module.sweep(add, **kwargs)
  else:
    module.sweep(add, arg, **kwargs)
  for name, config in runs:  # Fail before training anything.
    try:
      train.check_schedule(config)
    except UserError as e:
      raise UserError(f"run {name}: {e}") from None
  names = [n for n, _ in runs]
  if len(set(names)) != len(names):
    raise UserError("sweep(add) added the same run twice")
  return runs


def group_key(config):
  """Runs with equal keys share every shape and can be vmapped together."""
  c = json.loads(config.to_json_best_effort())
  for dotted in GROUPED_KEYS:
    *parents, leaf = dotted.split(".")
    node = c
    for p in parents:
      node = node.get(p, {})
    node.pop(leaf, None)
  return json.dumps(c, sort_keys=True)


def _stack(trees):
  return jax.tree.map(lambda *a: np.stack(a), *trees)


def group_folder(workdir, configs):
  """Where a vmapped group of these configs keeps its checkpoints: named by
  the configs and the device count (the stacked state's run axis)."""
  key = "\n".join(
      [str(jax.device_count())]
      + [  # Host settings may change on a resume (`train.stored_config`).
          json.dumps(
              train.stored_config(json.loads(c.to_json_best_effort())),
              sort_keys=True,
          )
          for c in configs
      ]
  )
  digest = hashlib.sha256(key.encode()).hexdigest()[:16]
  return os.path.join(workdir, "groups", digest)


def _save_stopped(folder, run, params, labels):
  """A stopped run's trained params, kept beside the group's checkpoints."""
  path = os.path.join(folder, f"stopped_{run}.npz")
  with tempfile.NamedTemporaryFile(
      dir=folder, suffix=".npz", delete=False
  ) as f:
    np.savez(
        f, *[np.asarray(x) for x in train.trainable_leaves(params, labels)]
    )
  os.replace(f.name, path)


def _load_stopped(folder, run, params, labels):
  """The stopped run's params: its initial `params` with the saved leaves."""
  with np.load(os.path.join(folder, f"stopped_{run}.npz")) as z:
    saved = [z[f"arr_{i}"] for i in range(len(z.files))]
  return train.with_trainable(params, labels, saved)


def _restore_group(folder, mngr, state, labels):
  """(state, start_step, progress) from the group's latest checkpoint, or
  (state, 0, None) where it has none; state is the group's initial stacked
  state, whose frozen leaves the restored one keeps."""
  step = mngr.latest_step()
  if not step:
    return state, 0, None
  abstract = jax.tree.map(
      ocp.utils.to_shape_dtype_struct, train.checkpointed(state, labels)
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
  return train.from_checkpointed(state, labels, saved), step, restored.progress


def train_group(configs, folder=None):
  """Trains R runs of one shape group at once; returns one metrics dict per run.

  The same loop as one run's (`train.train_loop`), over a vmap of the same
  `train.train_step`, the same batches (`train.train_batch`) and the same
  evaluation (`train.evaluation`). With `folder` (one process only;
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
  spec = train.model_spec(first, task.info)
  # Auto axes: the sharding is a layout for the compiler, not part of the
  # types (an Explicit "runs" axis fails in the batching of `lax.scan`).
  mesh = jax.make_mesh(
      (jax.device_count(),), ("runs",), axis_types=(AxisType.Auto,)
  )
  runs = list(configs) + [configs[-1]] * (-len(configs) % mesh.size)  # Pad.
  # Each run's own spec: runs of a group may differ in model.ut_seed, which
  # draws the frozen weights (`models.init`); the shapes are the same.
  states = [
      train.init_state(c, train.model_spec(c, task.info))[0] for c in runs
  ]
  tx, _ = train.make_optimizer(first, states[0].params, spec)
  shard = NamedSharding(mesh, P("runs"))
  stacked, start_step, progress = _stack(states), 0, None
  labels = models.labels(states[0].params, spec)
  mngr = None
  if folder is not None:
    os.makedirs(folder, exist_ok=True)
    train.check_frozen(
        os.path.join(folder, train.FROZEN_SUMS), stacked.params, labels
    )
    mngr = train.checkpoint_manager(folder, single_item=False)
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
  progress = progress or {}
  as_ints = lambda d: {int(k): v for k, v in (d or {}).items()}
  as_curves = lambda key: {  # Saved [[step, accuracy]] lists, as tuples.
      i: [tuple(p) for p in c] for i, c in as_ints(progress.get(key)).items()
  }
  # Metrics are copied to every device, so that every process reads them all.
  step_fn = jax.jit(
      jax.vmap(functools.partial(train.train_step, spec=spec, tx=tx)),
      in_shardings=(shard, shard),
      out_shardings=(shard, NamedSharding(mesh, P())),
      donate_argnums=0,
      **train.compiler_options(first),
  )
  held_out = [train.eval_batches(c, task) for c in configs]
  tested = [train.test_batches(c, task) for c in configs]

  def evaluate(state, indices):
    params = _fetch(state.params)
    return {
        i: train.evaluation(_run(params, i), spec, held_out[i], tested[i])
        for i in indices
    }

  # A run that stops early keeps that step's params.
  stopped = {i: tuple(v) for i, v in as_ints(progress.get("stopped")).items()}
  stopped_params = {
      i: _load_stopped(folder, i, states[i].params, labels) for i in stopped
  }

  def on_stop(i, step, state):
    stopped_params[i] = _run(_fetch(state.params), i)
    if folder is not None:
      _save_stopped(folder, i, stopped_params[i], labels)

  def save(step, state, progress):
    mngr.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(train.checkpointed(state, labels)),
            progress=ocp.args.JsonSave(progress),
        ),
    )

  try:
    result = train.train_loop(
        _place(stacked, shard),
        step_fn,
        lambda step: _place(
            _stack([train.train_batch(c, task, step) for c in runs]), shard
        ),
        configs,
        evaluate=evaluate,
        on_stop=on_stop,
        save=save if mngr is not None else None,
        start_step=start_step,
        last_loss=progress.get("last_loss"),
        curves=as_curves("curves"),
        test_curves=as_curves("test_curves"),
        resumed=dict(
            evals=as_ints(progress.get("evals")),
            stopped=stopped,
            diverged=as_ints(progress.get("diverged")),
        ),
        name=f"group of {len(configs)} runs on {mesh.size} device(s)",
    )
  finally:
    if mngr is not None:
      mngr.wait_until_finished()
      mngr.close()
  params = _fetch(result.state.params)
  results = [
      _diverged(config, result.diverged[i])
      if i in result.diverged
      else train.run_summary(
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


def _diverged(config, diagnosis):
  """The record of a run whose training loss became NaN or inf: rerunning it
  would diverge again, so the sweep records it (accuracy NaN) and goes on."""
  return dict(
      eval_accuracy=math.nan,
      diverged=diagnosis,
      task=config.task,
      kind=config.model.kind,
      variant=config.model.variant,
  )


def use_vmap(batching):
  """'vmap', 'sequential', or 'auto': vmap unless there is one CPU device.

  Measured on a 2-core CPU: a vmapped group of 3 Dyck runs takes 1.3-1.8x the
  time of the same runs one after another (XLA's batched matmuls are slower
  there), so on a single CPU device runs go one by one. On several devices or
  an accelerator, groups are vmapped and sharded.
  """
  if batching not in ("auto", "vmap", "sequential"):
    raise UserError(f"--batching={batching!r}; use auto, vmap or sequential")
  if batching == "sequential" and jax.process_count() > 1:
    raise UserError(
        f"--batching=sequential trains in one process, but there "
        f"are {jax.process_count()}; use --batching=auto or vmap"
    )
  if batching == "auto":
    return jax.device_count() > 1 or jax.default_backend() != "cpu"
  return batching == "vmap"


def run_sweep(
    config_path,
    workdir,
    batching="auto",
    aggregate_only=False,
    worker=None,
    started=None,
    overrides=None,
):
  """Runs every unfinished run of the config's sweep; returns the aggregate rows.

  aggregate_only: train nothing; tabulate the finished runs and name the rest.
  worker: (index, count, claims) to be one of `count` worker processes (see
    `worker_command`): train the largest work units (`work_units`) not yet
    claimed in the folder `claims`, write no table, return None.
  started: time.time() at which the sweep began (for the table's wall time).
  overrides: fields set in every run's config (`collect_runs`).

  With several JAX processes (`jax.distributed.initialize()` first), every
  process trains each vmapped group's share of runs on its devices; only
  process 0 reads or writes the workdir, and the others return None.
  """
  module = load_config_module(config_path)
  arg = config_path.split(":", 1)[1] if ":" in config_path else None
  # Several JAX processes must plan the same runs: results do not steer them.
  adaptive_dir = workdir if jax.process_count() == 1 else None
  runs = collect_runs(module, arg, adaptive_dir, overrides)
  writer = jax.process_index() == 0
  if writer:  # Other processes do not write the cache either.
    use_compilation_cache(workdir)
  started = time.time() if started is None else started
  vmapped = use_vmap(batching)
  logging.info(
      "batching: %s",
      "vmapped groups over a device mesh"
      if vmapped
      else "one run after another (single CPU device)",
  )
  claimed = 0
  while True:  # Passes: a sweep may add runs once others are recorded.
    trained = 0
    groups = {}
    for name, config in runs:
      groups.setdefault(group_key(config), []).append((name, config))
    done = _done_in_every_process(workdir, runs)
    todo = sum(1 for name, _ in runs if not done[name])
    logging.info(
        "%d runs in %d shape groups; %d to do, %d device(s) in %d process(es)",
        len(runs),
        len(groups),
        todo,
        jax.device_count(),
        jax.process_count(),
    )
    mine = work_units(list(groups.values()), vmapped)
    if worker is not None:  # Largest first; each unit goes to whoever is free.
      mine = workers.worker_order(
          mine,
          worker[0],
          worker[1],
          cost=lambda unit: run_cost(unit[0][1]),
          memory_bound=lambda unit: workers.memory_bound(unit[0][1].model.kind),
      )
    for members in mine:
      # Another worker may have finished a unit since this one started.
      pending = [
          (n, c)
          for n, c in members
          if not done[n] and not (worker is not None and _done(workdir, n, c))
      ]
      if jax.process_count() > 1 and any(c.get("compiled") for _, c in pending):
        # They train their target alone, with checkpoints, in process 0.
        logging.warning(
            "compiled-UT runs are left to a one-process run of the "
            "same command, in the same workdir: %s",
            ", ".join(n for n, c in pending if c.get("compiled")),
        )
        pending = [(n, c) for n, c in pending if not c.get("compiled")]
      if not pending or aggregate_only:
        continue
      if worker is not None:
        # The first run still to train: a unit that grew in a later pass has
        # a new name to claim.
        if not claim(worker[2], pending[0][0]):
          continue
        claimed += 1
        logging.info(
            "worker %d of %d claimed %s (%d runs)",
            worker[0],
            worker[1],
            pending[0][0],
            len(pending),
        )
      start = time.perf_counter()
      trained += 1
      plain = [(n, c) for n, c in pending if not c.get("compiled")]
      compiled_runs = [(n, c) for n, c in pending if c.get("compiled")]
      pending = plain + compiled_runs
      folder = None
      if vmapped and plain:
        # One process checkpoints the group (several would all write it).
        if jax.process_count() == 1:
          folder = group_folder(workdir, [c for _, c in plain])
        results = train_group([c for _, c in plain], folder)
      else:  # Each run is a plain training run, checkpointed in its own folder.
        results = [_train_one(c, _run_dir(workdir, n)) for n, c in plain]
      # A compiled run whose target diverged here is recorded, not retrained.
      diverged = {
          c.to_json_best_effort(): r["diverged"]
          for (_, c), r in zip(plain, results)
          if "diverged" in r
      }
      results += [
          _compile_one(
              c,
              _target_dir(workdir, n, c, members),
              diverged.get(_target_json(c)),
          )
          for n, c in compiled_runs
      ]
      seconds = time.perf_counter() - start
      for (name, config), result in zip(pending, results):
        result.update(
            name=name,
            seed=config.seed,
            lr=config.train.lr,
            group_seconds=seconds,
            group_size=len(pending),
            run_seconds=seconds / len(pending),
            vmapped=vmapped,
            config=json.loads(config.to_json_best_effort()),
            provenance=reports.provenance(),
        )
        if writer:
          reports.write_json(_metrics_path(workdir, name), result)
      if folder is not None:  # Its runs are recorded: the state is spent.
        shutil.rmtree(folder, ignore_errors=True)
      logging.info(
          "group done in %.1fs: %s",
          seconds,
          ", ".join(
              f"{n}: {r['eval_accuracy']:.4f}"
              for (n, _), r in zip(pending, results)
          ),
      )
    # Another pass only after this one trained something and the sweep then
    # planned runs it had not (whoever records a run collects again after).
    if aggregate_only or not trained:
      break
    again = collect_runs(module, arg, adaptive_dir, overrides)
    added = {n for n, _ in again} - {n for n, _ in runs}
    if not added:
      break
    logging.info(
        "the sweep added %d runs from recorded results: another pass",
        len(added),
    )
    runs = again
  if worker is not None:
    logging.info(
        "worker %d of %d: trained %d of %d work units",
        worker[0],
        worker[1],
        claimed,
        len(mine),  # The last pass's plan (a unit that grew counts twice).
    )
    return None
  if not writer:
    logging.info(
        "process %d of %d: done; process 0 writes the table",
        jax.process_index(),
        jax.process_count(),
    )
    return None
  # Runs another worker or this process finished since the start count too.
  done = {n: _done(workdir, n, c) for n, c in runs}
  finished = [n for n, _ in runs if done[n]]
  missing = [n for n, _ in runs if not done[n]]
  if not finished:
    raise UserError(f"no finished runs of this sweep in {workdir}")
  rows = aggregate(workdir, finished)
  write_table(
      workdir,
      rows,
      dict(
          config=config_path,
          wall_seconds=time.time() - started,
          total_run_seconds=_total_seconds(workdir, finished),
          missing_runs=missing,
          provenance=reports.provenance(),
      ),
  )
  if missing:
    logging.warning(
        "%d of %d runs are not finished and not in the table",
        len(missing),
        len(runs),
    )
  return rows


def work_units(groups, vmapped):
  """What one process trains at a time (and a worker claims): a whole shape
  group when groups are vmapped; else each run alone, with the compiled-UT runs
  of its model (they restore it from the run's folder) after it."""
  if vmapped:
    return groups
  units = []
  for members in groups:
    by_target = {}  # Compiled-UT runs by the config of the model they compile.
    for name, config in members:
      if config.get("compiled"):
        by_target.setdefault(_target_json(config), []).append((name, config))
    for name, config in members:
      if not config.get("compiled"):
        units.append(
            [(name, config)] + by_target.pop(config.to_json_best_effort(), [])
        )
    # Compiled-UT runs whose target is not in the sweep: each on its own.
    units.extend([run] for runs in by_target.values() for run in runs)
  return units


def _target_json(config):
  """The config of the model a compiled-UT run compiles, as JSON."""
  target = config.copy_and_resolve_references()
  target.compiled = ""
  return target.to_json_best_effort()


def _train_one(config, run_dir):
  """train_and_evaluate, except that a diverged run is recorded (accuracy NaN,
  with the diagnosis) and the sweep goes on; rerunning it would diverge again.
  """
  try:
    return train.train_and_evaluate(config, run_dir)
  except train.TrainingDiverged as e:
    logging.warning("%s diverged: %s", run_dir, e)
    return _diverged(config, str(e))


def _compile_one(config, target_dir, target_diverged=None):
  """compiled.sweep_run, except that a run whose target diverged (here, as
  `target_diverged` says, or while training in target_dir) is recorded like a
  diverged run and the sweep goes on."""
  try:
    if target_diverged:
      raise train.TrainingDiverged(target_diverged)
    return compiled.sweep_run(config, target_dir)
  except train.TrainingDiverged as e:
    logging.warning("%s: the target diverged: %s", target_dir, e)
    return dict(
        eval_accuracy=math.nan,
        diverged=f"its target diverged: {e}",
        task=config.task,
        kind=f"compiled_{config.compiled}",
        variant=config.model.variant,
    )


def run_cost(config):
  """`workers.cost_proxy` of a run: the sizes of its config and model."""
  spec = train.model_spec(config, data_lib.make_task(config).info)
  return workers.cost_proxy(
      steps=config.train.steps,
      batch_size=config.train.batch_size,
      tokens=spec.max_len,
      layers=spec.num_layers,
      width=spec.model_width,
      mlp=spec.variant == "res_ln_mlp",
  )


def claims_folder(workdir):
  """A new folder for one set of workers' claims (removed when they are done)."""
  os.makedirs(os.path.join(workdir, "claims"), exist_ok=True)
  return tempfile.mkdtemp(
      prefix=f"{os.getpid()}_", dir=os.path.join(workdir, "claims")
  )


def claim(folder, first_run):
  """True for the one worker that creates the group's claim file first."""
  try:
    os.close(os.open(os.path.join(folder, first_run), os.O_CREAT | os.O_EXCL))
  except FileExistsError:
    return False
  return True


def use_compilation_cache(workdir):
  """JAX's persistent compilation cache in <workdir>/jax_cache: runs that differ
  only in their seed compile the same step, so all but the first load it."""
  jax.config.update(
      "jax_compilation_cache_dir", os.path.join(workdir, "jax_cache")
  )
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def worker_command(argv, index, count, claims):
  """(argv, cpus) of worker process `index` of `count` for a sweep on CPU.

  Each is pinned to its own CPUs (`ut.cpu.workers.worker_cpus`) and takes the
  largest unit of work (`work_units`, `run_cost`) that no worker has claimed
  yet (`claim`), so the load balances itself; half of them look at
  memory-bound units first, the others last (`ut.cpu.workers.worker_order`).
  """
  args = [a for a in argv[1:] if not a.startswith(("--workers", "--worker_"))]
  return (
      [
          sys.executable,
          "-m",
          "launch.sweep",
          *args,
          f"--workers={count}",
          f"--worker_index={index}",
          f"--worker_claims={claims}",
      ],
      workers.worker_cpus(index, count),
  )


def _total_seconds(workdir, names):
  """Training time of the finished runs (as recorded; None where unrecorded)."""
  total = 0.0
  for name in names:
    with open(_metrics_path(workdir, name)) as f:
      seconds = json.load(f).get("run_seconds")
    if seconds is None:
      return None
    total += seconds
  return total


def _run_dir(workdir, name):
  return os.path.join(workdir, "runs", name)


def _metrics_path(workdir, name):
  return os.path.join(_run_dir(workdir, name), "metrics.json")


def _target_dir(workdir, name, config, members):
  """Where a compiled run's target trains: the sweep's own run of it, if that
  run finished training with checkpoints here (one by one, not vmapped), else
  a folder of its own."""
  target = _target_json(config)
  for n, c in members:
    if (
        c.to_json_best_effort() == target
        and os.path.exists(_metrics_path(workdir, n))
        and os.path.isdir(os.path.join(_run_dir(workdir, n), "checkpoints"))
    ):
      return _run_dir(workdir, n)
  return os.path.join(_run_dir(workdir, name), "target")


def recorded_metrics(workdir, name):
  """The run's metrics.json as the sweep recorded it, or None."""
  if workdir is None or not os.path.exists(_metrics_path(workdir, name)):
    return None
  with open(_metrics_path(workdir, name)) as f:
    metrics = json.load(f)
  return metrics if metrics.get("config") is not None else None


def _done_in_every_process(workdir, runs):
  """{name: `_done`} for the runs, as process 0 reads the workdir, in every
  process: the others need not see it (hosts may not share a filesystem)."""
  if jax.process_count() == 1:
    return {name: _done(workdir, name, config) for name, config in runs}
  flags = np.zeros(len(runs) + 1, np.int32)  # The last: process 0 failed.
  error = None
  if jax.process_index() == 0:
    try:
      flags[:-1] = [_done(workdir, name, config) for name, config in runs]
    except UserError as e:
      error, flags[-1] = e, 1
  flags = multihost_utils.broadcast_one_to_all(flags)
  if error is not None:
    raise error
  if flags[-1]:
    raise UserError(
        "process 0 found a run recorded with another config; see " "its error"
    )
  return {name: bool(f) for (name, _), f in zip(runs, flags[:-1])}


def _done(workdir, name, config):
  """A run is done once the sweep recorded it (not merely trained it).

  Raises UserError if it was recorded with a config other than `config` (an
  older version of the grid): its result must not enter this table.
  """
  path = _metrics_path(workdir, name)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    recorded = json.load(f).get("config")
  if recorded is None:
    return False
  diff = train.config_diff(
      train.stored_config(recorded),
      train.stored_config(json.loads(config.to_json_best_effort())),
  )
  if diff:
    raise UserError(
        f"{_run_dir(workdir, name)} was recorded with another config "
        f"(differs in {', '.join(diff)}); use a fresh --workdir, or "
        f"delete that run folder to train it again"
    )
  return True


SUCCESS = 0.99  # A run succeeds when its final held-out accuracy reaches this.


def aggregate(workdir, names):
  """One row per cell: the runs that differ only in their seeds (`seed`, and
  `model.ut_seed`: a random UT's draw is one more seed of the cell).

  Mean ± std (ddof=1) of the validation (eval_accuracy) and, where the runs
  have one, the test accuracy; how many runs end at >= SUCCESS on validation,
  and the median step at which those first reached it (`steps_to_99`). Where
  every run scored the test set at each evaluation (config.eval.test_each),
  also mean ± std of its test accuracy at its best validation
  (`test_at_best_valid`): test_best_mean and test_best_std.
  """
  cells = {}
  for name in names:
    with open(_metrics_path(workdir, name)) as f:
      r = json.load(f)
    cfg = train.stored_config(r["config"])
    cfg.pop("seed", None)
    cfg.get("model", {}).pop("ut_seed", None)
    key = json.dumps(cfg, sort_keys=True)
    cells.setdefault(key, []).append(r)
  rows = []
  for results in cells.values():
    acc = np.array([r["eval_accuracy"] for r in results])
    test = np.array([r.get("test_accuracy", math.nan) for r in results])
    wins = [r for r in results if r["eval_accuracy"] >= SUCCESS]
    first = [r["steps_to_99"] for r in wins if r.get("steps_to_99")]
    c = results[0]["config"]
    trained = [r for r in results if not r["config"].get("compiled")]
    rows.append(
        dict(
            task=results[0]["task"],
            kind=results[0]["kind"],
            variant=results[0]["variant"],
            width=results[0].get("model_width"),
            data=json.dumps(c.get("data", {}), sort_keys=True),
            lr=c["train"]["lr"],
            seeds=len(results),
            accuracy_mean=float(acc.mean()),
            accuracy_std=std(acc),
            test_mean=float(test.mean()),
            test_std=std(test),
            successes=len(wins),
            median_steps_to_99=float(np.median(first)) if first else None,
            max_steps=max(r.get("step", 0) for r in results),
            cap=c["train"]["steps"],  # The step cap of the cell's runs.
            # Compiled-UT rows: the lowest share of predictions equal to the target's.
            agreement_min=min(
                (r["agreement"] for r in results if "agreement" in r),
                default=None,
            ),
            # Compiled-UT runs train nothing (their target's time is its own
            # row's).
            trained_runs=len(trained),
            # Runs of a resumed group: their seconds count from the resume.
            resumed_runs=sum("resumed_at_step" in r for r in trained),
            **_test_at_best(results),
            **device_minutes(
                [(r, _run_minutes(workdir, r)) for r in trained], "core_minutes"
            ),
            runs=";".join(sorted(r["name"] for r in results)),
        )
    )
  return rows


def train_minutes(run_dir):
  """Minutes the run's training steps took, from its train_metrics.csv
  (steps between log rows over each row's steps_per_sec; not counting
  evaluation and compilation)."""
  path = os.path.join(run_dir, "train_metrics.csv")
  if not os.path.exists(path):
    return math.nan
  with open(path) as f:
    rows = list(csv.DictReader(f))
  seconds, last = 0.0, 0
  for row in rows:
    step = int(row["step"])
    seconds += (step - last) / float(row["steps_per_sec"])
    last = step
  return seconds / 60


def _run_minutes(workdir, metrics):
  """A recorded run's training time: its steps' time from its log
  (`train_minutes`), or, for a run of a vmapped group (no log of its own),
  its share of the group's seconds."""
  minutes = train_minutes(_run_dir(workdir, metrics["name"]))
  if math.isnan(minutes):
    return metrics.get("run_seconds", math.nan) / 60
  return minutes


def device_minutes(runs, cpu_key):
  """The minutes of [(metrics, minutes)] runs by where they trained:
  {cpu_key: on the CPU, accelerator_runs, accelerator_minutes, accelerators
  (their device names, ';'-joined)}."""
  apart = [(r, m) for r, m in runs if not on_cpu(r)]
  return {
      cpu_key: float(sum(m for r, m in runs if on_cpu(r))),
      "accelerator_runs": len(apart),
      "accelerator_minutes": float(sum(m for _, m in apart)),
      "accelerators": ";".join(
          sorted({r["provenance"]["device"] for r, _ in apart})
      ),
  }


def on_cpu(metrics):
  """Whether a recorded run trained on a CPU (runs recorded before the
  device was, did)."""
  return (metrics.get("provenance") or {}).get("device", "cpu") == "cpu"


def cost_note(rows, dot_gflops):
  """One line: the table's CPU training time in core-hours (each row's
  `core_minutes`) beside the machine's matmul speed (GFLOP/s), the minutes
  of the runs trained on an accelerator, and how many runs were resumed
  (their time counts from the resume), if any."""
  gpu_runs = sum(r.get("accelerator_runs", 0) for r in rows)
  resumed = sum(r.get("resumed_runs", 0) for r in rows)
  runs = sum(r["trained_runs"] for r in rows) - gpu_runs
  hours = sum(r["core_minutes"] for r in rows) / 60
  note = (
      f"Training: {hours:.1f} core-hours over {runs} runs trained on the CPU "
      f"(each run's training steps, from its log; evaluation and compilation "
      f"not counted). 2048^2 float32 matmul when this table was written: "
      f"{dot_gflops:.0f} GFLOP/s."
  )
  if gpu_runs:
    names = sorted(
        {n for r in rows for n in (r.get("accelerators") or "").split(";")}
        - {""}
    )
    minutes = sum(r["accelerator_minutes"] for r in rows)
    note += (
        f" {gpu_runs} run{'s' * (gpu_runs != 1)} trained on"
        f" {' and '.join(names)}: {minutes:.0f} minutes of training steps (a"
        " vmapped group's: its wall time shared among its runs; the"
        " accelerator may have been shared with other processes)."
    )
  if resumed:
    note += (
        f" {resumed} run{'s' * (resumed != 1)} of resumed vmapped groups"
        " count only their time after the resume."
    )
  return note


def std(values):
  """The sample std (ddof=1), nan for one value."""
  return float(values.std(ddof=1)) if len(values) > 1 else math.nan


def write_table(workdir, rows, meta):
  reports.write_csv(os.path.join(workdir, "table.csv"), rows)
  reports.write_json(
      os.path.join(workdir, "table.json"), dict(rows=rows, **meta)
  )
  reports.write_text(
      os.path.join(workdir, "table.md"), markdown_table(rows) + "\n"
  )


def unfinished_runs(workdir):
  """[(name, config, curve)] for the runs of the last aggregate that are not
  finished (table.json's missing_runs): each run's stored config.json ({}
  where it has none yet) and its validation curve [(step, accuracy)] from its
  eval_metrics.csv ([] before its first evaluation)."""
  path = os.path.join(workdir, "table.json")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    missing = json.load(f).get("missing_runs") or []
  out = []
  for name in missing:
    run_dir = _run_dir(workdir, name)
    config, curve = {}, []
    if os.path.exists(os.path.join(run_dir, "config.json")):
      with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    if os.path.exists(os.path.join(run_dir, "eval_metrics.csv")):
      with open(os.path.join(run_dir, "eval_metrics.csv")) as f:
        curve = [
            (int(r["step"]), float(r["accuracy"])) for r in csv.DictReader(f)
        ]
    out.append((name, config, curve))
  return out


def unfinished_note(workdir):
  """One line naming the runs of the last aggregate that are not finished
  (`unfinished_runs`), each with its latest evaluation, or "" where every
  run finished."""
  parts = []
  for name, config, curve in unfinished_runs(workdir):
    if not curve:
      parts.append(f"{name}: not started")
      continue
    cap = f" of {config['train']['steps']}" if config else ""
    step, accuracy = curve[-1]
    parts.append(
        f"{name}: step {step}{cap}, {100 * accuracy:.2f}% on validation"
    )
  if not parts:
    return ""
  if len(parts) == 1:
    runs = "1 run; its latest evaluation, and the same command resumes it"
  else:
    runs = (
        f"{len(parts)} runs; their latest evaluation, and the same command"
        " resumes them"
    )
  return (
      f"Not finished, so not in the table ({runs}): " + "; ".join(parts) + "."
  )


def _test_at_best(results):
  """test_best_mean and test_best_std where every run has a
  test_at_best_valid (config.eval.test_each), else nothing."""
  if not all("test_at_best_valid" in r for r in results):
    return {}
  best = np.array([r["test_at_best_valid"]["test_accuracy"] for r in results])
  return dict(test_best_mean=float(best.mean()), test_best_std=std(best))


def markdown_table(rows):
  # Wall time (core_minutes) goes to paper.md's cost line, not the table.
  shown = [
      {k: v for k, v in r.items() if k not in ("runs", "core_minutes")}
      for r in rows
  ]
  for r in shown:
    r["accuracy"] = reports.mean_std(
        r.pop("accuracy_mean"), r.pop("accuracy_std")
    )
    r["test"] = reports.mean_std(r.pop("test_mean"), r.pop("test_std"))
    if "test_best_mean" in r:
      r["test at best valid"] = reports.mean_std(
          r.pop("test_best_mean"), r.pop("test_best_std")
      )
    r[f"≥{100 * SUCCESS:.0f}%"] = f"{r.pop('successes')}/{r['seeds']}"
    r["median step to 99%"] = reports.step(r.pop("median_steps_to_99"))
    agreement = r.pop("agreement_min")
    r["agreement (min)"] = "" if agreement is None else f"{100 * agreement:.2f}"
  if any("test at best valid" in r for r in shown):
    for r in shown:
      r.setdefault("test at best valid", "")
  return reports.format_table(shown)
