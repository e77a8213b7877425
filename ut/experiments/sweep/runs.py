"""Running a sweep: passes over its plan, worker processes, several JAX processes.

`run_sweep` trains every unfinished run, a work unit (`plan.work_units`) at a
time: a vmapped group (`groups.train_group`), or one run and the compiled-UT
runs of its model. Each run writes runs/<name>/metrics.json; a restarted
sweep skips runs that have one. On CPU, `worker_command` starts one of
several pinned processes that claim units from a shared folder (`claim`).
"""

import functools
import json
import math
import os
import shutil
import sys
import tempfile
import time

from absl import logging
import jax
import ml_collections

from ut.cpu import workers
from ut.errors import UserError
from ut.experiments.sweep import groups
from ut.experiments.sweep import plan
from ut.experiments.sweep import records
from ut.experiments.sweep import tables
from ut.io import reports
from ut.training import data as data_lib
from ut.training import loop
from ut.training import models
from ut.training import train
from ut.training import trained_to_ut as compiled

Worker = tuple[int, int, str]  # (index, count, claims folder).


def run_sweep(
    config_path: str,
    workdir: str,
    batching: str = "auto",
    aggregate_only: bool = False,
    worker: Worker | None = None,
    started: float | None = None,
    overrides: dict | None = None,
) -> list[dict] | None:
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
  module = plan.load_config_module(config_path)
  # Several JAX processes must plan the same runs: results do not steer them.
  adaptive_dir = workdir if jax.process_count() == 1 else None
  collect = functools.partial(
      plan.collect_runs,
      module,
      plan.config_arg(config_path),
      adaptive_dir,
      overrides,
  )
  runs = collect()
  if jax.process_index() == 0:  # Other processes do not write the cache either.
    use_compilation_cache(workdir)
  started = time.time() if started is None else started
  vmapped = plan.use_vmap(batching)
  logging.info(
      "batching: %s",
      "vmapped groups over a device mesh"
      if vmapped
      else "one run after another (single CPU device)",
  )
  runs, claimed, units = _train_passes(
      collect, runs, workdir, vmapped, worker, aggregate_only
  )
  if worker is not None:
    logging.info(
        "worker %d of %d: trained %d of %d work units",
        worker[0],
        worker[1],
        claimed,
        units,  # The last pass's plan (a unit that grew counts twice).
    )
    return None
  if jax.process_index() != 0:
    logging.info(
        "process %d of %d: done; process 0 writes the table",
        jax.process_index(),
        jax.process_count(),
    )
    return None
  return _write_table(config_path, workdir, runs, started)


def _train_passes(collect, runs, workdir, vmapped, worker, aggregate_only):
  """Trains the units of `runs` not yet done, pass after pass while a pass
  trained something and the sweep then planned runs it had not (`collect`:
  whoever records a run collects again after). Returns (the last plan's runs,
  how many units this worker claimed, how many units the last pass had)."""
  claimed = 0
  while True:  # Passes: a sweep may add runs once others are recorded.
    trained = 0
    units, done = _units(workdir, runs, vmapped, worker)
    for members in units:
      pending = _pending(workdir, members, done, worker)
      if not pending or aggregate_only:
        continue
      if worker is not None:
        if not _claim_unit(worker, pending):
          continue
        claimed += 1
      trained += 1
      _train_unit(workdir, members, pending, vmapped)
    if aggregate_only or not trained:
      break
    again = collect()
    added = {n for n, _ in again} - {n for n, _ in runs}
    if not added:
      break
    logging.info(
        "the sweep added %d runs from recorded results: another pass",
        len(added),
    )
    runs = again
  return runs, claimed, len(units)


def _units(workdir, runs, vmapped, worker):
  """(this process's work units in the order it takes them, {name: done})."""
  shape_groups = plan.shape_groups(runs)
  done = records.done_in_every_process(workdir, runs)
  todo = sum(1 for name, _ in runs if not done[name])
  logging.info(
      "%d runs in %d shape groups; %d to do, %d device(s) in %d process(es)",
      len(runs),
      len(shape_groups),
      todo,
      jax.device_count(),
      jax.process_count(),
  )
  units = plan.work_units(shape_groups, vmapped)
  if worker is not None:  # Largest first; each unit goes to whoever is free.
    units = workers.worker_order(
        units,
        worker[0],
        worker[1],
        cost=lambda unit: run_cost(unit[0][1]),
        memory_bound=lambda unit: workers.memory_bound(unit[0][1].model.kind),
    )
  return units, done


def _pending(workdir, members, done, worker):
  """The unit's runs this process trains now: those not done, where another
  worker may have finished a unit since this one started; with several JAX
  processes, not the compiled-UT runs."""
  pending = [
      (n, c)
      for n, c in members
      if not done[n]
      and not (worker is not None and records.done(workdir, n, c))
  ]
  if jax.process_count() > 1 and any(c.get("compiled") for _, c in pending):
    # They train their target alone, with checkpoints, in process 0.
    logging.warning(
        "compiled-UT runs are left to a one-process run of the "
        "same command, in the same workdir: %s",
        ", ".join(n for n, c in pending if c.get("compiled")),
    )
    pending = [(n, c) for n, c in pending if not c.get("compiled")]
  return pending


def _claim_unit(worker, pending):
  """Claims the unit for this worker by its first run still to train (a unit
  that grew in a later pass has a new name to claim); False where another
  worker has it."""
  if not claim(worker[2], pending[0][0]):
    return False
  logging.info(
      "worker %d of %d claimed %s (%d runs)",
      worker[0],
      worker[1],
      pending[0][0],
      len(pending),
  )
  return True


def _train_unit(workdir, members, pending, vmapped):
  """Trains the pending runs of one work unit and records each (process 0):
  the plain runs, vmapped or one by one, then the compiled-UT runs."""
  start = time.perf_counter()
  plain = [(n, c) for n, c in pending if not c.get("compiled")]
  compiled_runs = [(n, c) for n, c in pending if c.get("compiled")]
  pending = plain + compiled_runs
  folder = None
  if vmapped and plain:
    # One process checkpoints the group (several would all write it).
    if jax.process_count() == 1:
      folder = groups.group_folder(workdir, [c for _, c in plain])
    results = groups.train_group([c for _, c in plain], folder)
  else:  # Each run is a plain training run, checkpointed in its own folder.
    results = [_train_one(c, records.run_dir(workdir, n)) for n, c in plain]
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
          diverged.get(plan.target_json(c)),
      )
      for n, c in compiled_runs
  ]
  seconds = time.perf_counter() - start
  _record(workdir, pending, results, seconds, vmapped)
  if folder is not None:  # Its runs are recorded: the state is spent.
    shutil.rmtree(folder, ignore_errors=True)
  logging.info(
      "group done in %.1fs: %s",
      seconds,
      ", ".join(
          f"{n}: {r['eval_accuracy']:.4f}" for (n, _), r in zip(pending, results)
      ),
  )


def _record(workdir, pending, results, seconds, vmapped):
  """Completes each run's metrics with its name, config, time and provenance,
  and (process 0) writes them to runs/<name>/metrics.json."""
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
    if jax.process_index() == 0:
      reports.write_json(records.metrics_path(workdir, name), result)


def _write_table(config_path, workdir, runs, started):
  """Aggregates the finished runs into workdir/table.*; returns the rows.
  Runs another worker or this process finished since the start count too."""
  done = {n: records.done(workdir, n, c) for n, c in runs}
  finished = [n for n, _ in runs if done[n]]
  missing = [n for n, _ in runs if not done[n]]
  if not finished:
    raise UserError(f"no finished runs of this sweep in {workdir}")
  rows = tables.aggregate(workdir, finished)
  tables.write_table(
      workdir,
      rows,
      dict(
          config=config_path,
          wall_seconds=time.time() - started,
          total_run_seconds=tables.total_seconds(workdir, finished),
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


def _target_dir(workdir, name, config, members):
  """Where a compiled run's target trains: the sweep's own run of it, if that
  run finished training with checkpoints here (one by one, not vmapped), else
  a folder of its own."""
  target = plan.target_json(config)
  for n, c in members:
    if (
        c.to_json_best_effort() == target
        and os.path.exists(records.metrics_path(workdir, n))
        and os.path.isdir(
            os.path.join(records.run_dir(workdir, n), "checkpoints")
        )
    ):
      return records.run_dir(workdir, n)
  return os.path.join(records.run_dir(workdir, name), "target")


def _train_one(config, run_dir):
  """train_and_evaluate, except that a diverged run is recorded (accuracy NaN,
  with the diagnosis) and the sweep goes on; rerunning it would diverge again.
  """
  try:
    return train.train_and_evaluate(config, run_dir)
  except loop.TrainingDiverged as e:
    logging.warning("%s diverged: %s", run_dir, e)
    return records.diverged(config, str(e))


def _compile_one(config, target_dir, target_diverged=None):
  """compiled.sweep_run, except that a run whose target diverged (here, as
  `target_diverged` says, or while training in target_dir) is recorded like a
  diverged run and the sweep goes on."""
  try:
    if target_diverged:
      raise loop.TrainingDiverged(target_diverged)
    return compiled.sweep_run(config, target_dir)
  except loop.TrainingDiverged as e:
    logging.warning("%s: the target diverged: %s", target_dir, e)
    return dict(
        eval_accuracy=math.nan,
        diverged=f"its target diverged: {e}",
        task=config.task,
        kind=f"compiled_{config.compiled}",
        variant=config.model.variant,
    )


def run_cost(config: ml_collections.ConfigDict) -> int:
  """`workers.cost_proxy` of a run: the sizes of its config and model."""
  spec = models.model_spec(config, data_lib.make_task(config).info)
  return workers.cost_proxy(
      steps=config.train.steps,
      batch_size=config.train.batch_size,
      tokens=spec.max_len,
      layers=spec.num_layers,
      width=spec.model_width,
      mlp=spec.variant == "res_ln_mlp",
  )


def claims_folder(workdir: str) -> str:
  """A new folder for one set of workers' claims (removed when they are done)."""
  os.makedirs(os.path.join(workdir, "claims"), exist_ok=True)
  return tempfile.mkdtemp(
      prefix=f"{os.getpid()}_", dir=os.path.join(workdir, "claims")
  )


def claim(folder: str, first_run: str) -> bool:
  """True for the one worker that creates the group's claim file first."""
  try:
    os.close(os.open(os.path.join(folder, first_run), os.O_CREAT | os.O_EXCL))
  except FileExistsError:
    return False
  return True


def use_compilation_cache(workdir: str) -> None:
  """JAX's persistent compilation cache in <workdir>/jax_cache: runs that differ
  only in their seed compile the same step, so all but the first load it."""
  jax.config.update(
      "jax_compilation_cache_dir", os.path.join(workdir, "jax_cache")
  )
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def worker_command(
    argv: list[str], index: int, count: int, claims: str
) -> tuple[list[str], set[int]]:
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
