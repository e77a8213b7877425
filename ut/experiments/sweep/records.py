"""What a sweep has recorded in its workdir: runs/<name>/metrics.json.

A run is done once the sweep recorded it (not merely trained it); only process
0 reads the workdir, and tells the other processes which runs are done.
"""

import json
import math
import os

import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from ut.errors import UserError
from ut.training import records as records_lib

Run = tuple[str, ml_collections.ConfigDict]  # (name, config) of one run.


def run_dir(workdir: str, name: str) -> str:
  return os.path.join(workdir, "runs", name)


def metrics_path(workdir: str, name: str) -> str:
  return os.path.join(run_dir(workdir, name), "metrics.json")


def recorded_metrics(workdir: str | None, name: str) -> dict | None:
  """The run's metrics.json as the sweep recorded it, or None."""
  if workdir is None or not os.path.exists(metrics_path(workdir, name)):
    return None
  with open(metrics_path(workdir, name)) as f:
    metrics = json.load(f)
  return metrics if metrics.get("config") is not None else None


def done_in_every_process(workdir: str, runs: list[Run]) -> dict[str, bool]:
  """{name: `done`} for the runs, as process 0 reads the workdir, in every
  process: the others need not see it (hosts may not share a filesystem)."""
  if jax.process_count() == 1:
    return {name: done(workdir, name, config) for name, config in runs}
  flags = np.zeros(len(runs) + 1, np.int32)  # The last: process 0 failed.
  error = None
  if jax.process_index() == 0:
    try:
      flags[:-1] = [done(workdir, name, config) for name, config in runs]
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


def done(workdir: str, name: str, config: ml_collections.ConfigDict) -> bool:
  """A run is done once the sweep recorded it (not merely trained it).

  Raises UserError if it was recorded with a config other than `config` (an
  older version of the grid): its result must not enter this table.
  """
  path = metrics_path(workdir, name)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    recorded = json.load(f).get("config")
  if recorded is None:
    return False
  diff = records_lib.config_diff(
      records_lib.stored_config(recorded),
      records_lib.stored_config(json.loads(config.to_json_best_effort())),
  )
  if diff:
    raise UserError(
        f"{run_dir(workdir, name)} was recorded with another config "
        f"(differs in {', '.join(diff)}); use a fresh --workdir, or "
        f"delete that run folder to train it again"
    )
  return True


def diverged(config: ml_collections.ConfigDict, diagnosis: str) -> dict:
  """The record of a run whose training loss became NaN or inf: rerunning it
  would diverge again, so the sweep records it (accuracy NaN) and goes on."""
  return dict(
      eval_accuracy=math.nan,
      diverged=diagnosis,
      task=config.task,
      kind=config.model.kind,
      variant=config.model.variant,
  )
