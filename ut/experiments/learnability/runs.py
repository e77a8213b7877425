"""One UT run of the learnability experiment: its config, its start (a random
one or E_c plus noise), its training and its start's test accuracy."""

import json
import math
import os

from absl import logging
import numpy as np

from ut.errors import UserError
from ut.experiments.sweep import tables
from ut.io import reports
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out
from ut.training import models
from ut.training import records
from ut.training import train

SCRATCH = "scratch"


def noisy_program(program, noise, seed):
  """E_c with Gaussian noise of relative size `noise` per table, U_c as is:
  the flat {"embed/token", "embed/position", "unembed"} of an init .npz."""
  rng = np.random.default_rng(seed)
  out = {"unembed": np.asarray(program["unembed"], np.float32)}
  for name in ("token", "position"):
    e = np.asarray(program["embed"][name], np.float64)
    rms = math.sqrt(float(np.mean(e**2)))
    out[f"embed/{name}"] = (
        e + noise * rms * rng.standard_normal(e.shape)
    ).astype(np.float32)
  return out


def start_name(noise):
  return SCRATCH if noise is None else f"noise={noise:g}"


def ut_config(config, ut_spec, construction, seed):
  """The training config of one UT run: config.ut (the UTs' protocol) with
  the target's task and data, the UT's kind and shapes (ut_spec) and `seed`."""
  c = config.ut.copy_and_resolve_references()
  c.task = config.target.task
  c.data = config.target.data.copy_and_resolve_references()
  c.seed = seed
  c.model.kind = construction
  c.model.variant = "attn"
  c.model.ut_seed = config.ut_seed
  c.model.num_heads = ut_spec.num_heads
  c.model.num_layers = ut_spec.num_layers
  if construction == "sparse":
    c.model.width = ut_spec.width
    c.model.mlp_width = 0
  else:
    c.model.m = ut_spec.m
    c.model.head_width = ut_spec.head_width
  c.compiled = ""
  c.train.lr = config.lr[construction]
  return c


def _ensure_target(config, workdir):
  target_dir = os.path.join(workdir, "target")
  if not os.path.exists(os.path.join(target_dir, "metrics.json")):
    train.train_and_evaluate(config.target, target_dir)
  return checkpoint.restore_params(target_dir)


def _save_program(path, params):
  """The program as an init .npz (`config.train.init_params`' form); a file
  holding the same arrays is left as it is."""
  program = noisy_program(params, 0.0, seed=0)
  if os.path.exists(path):
    with np.load(path) as saved:
      if sorted(saved.files) == sorted(program) and all(
          np.array_equal(saved[k], v) for k, v in program.items()
      ):
        return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  np.savez(path, **program)


def _read(path):
  with open(path) as f:
    return json.load(f)


def _run_dir(workdir, construction, noise, seed):
  return os.path.join(
      workdir, "runs", f"{construction}_{start_name(noise)}_seed={seed}"
  )


def _finished(workdir, construction, noise, seed):
  """Whether the run has its metrics and its start's accuracy recorded."""
  run_dir = _run_dir(workdir, construction, noise, seed)
  return all(
      os.path.exists(os.path.join(run_dir, f))
      for f in ("metrics.json", "start.json")
  )


def _check_recorded_config(config, run_dir):
  """A UserError if a finished run was trained with another config than
  `config` (its warm start's path aside): e.g. at another learning rate."""
  path = os.path.join(run_dir, "config.json")
  if not os.path.exists(path):
    raise UserError(
        f"{run_dir} has metrics.json but no config.json: its config is "
        "unknown; move that run folder away to train it again"
    )
  recorded = records.stored_config(_read(path))
  now = records.stored_config(json.loads(config.to_json_best_effort()))
  for c in (recorded, now):
    c.get("train", {}).pop("init_params", None)
  diff = records.config_diff(recorded, now)
  if diff:
    raise UserError(
        f"{run_dir} was trained with another config (differs in "
        f"{', '.join(diff[:4])}); move that run folder away to train it again"
    )


def _run(config, workdir, construction, ut_params, ut_spec, noise, seed):
  """Trains (or resumes) one UT run; returns its metrics.json with its name
  and the start's test accuracy (start.json) added."""
  run_dir = _run_dir(workdir, construction, noise, seed)
  name = os.path.basename(run_dir)
  os.makedirs(run_dir, exist_ok=True)
  c = ut_config(config, ut_spec, construction, seed)
  start_path = os.path.join(run_dir, "start.json")
  metrics_path = os.path.join(run_dir, "metrics.json")
  if os.path.exists(metrics_path):
    _check_recorded_config(c, run_dir)
  if noise is not None:
    init = os.path.join(run_dir, "init.npz")
    needed = not (os.path.exists(metrics_path) and os.path.exists(start_path))
    if needed and not os.path.exists(init):  # The same draw on every resume.
      np.savez(init, **noisy_program(ut_params, noise, seed))
    c.train.init_params = init
  if not os.path.exists(start_path):
    task = data_lib.make_task(c)
    spec = models.model_spec(c, task.info)
    start = checkpoint.init_state(c, spec)[0].params
    acc = held_out.test_metrics(start, spec, c, task)["test_accuracy"]
    logging.info("%s: test accuracy at the start %.4f", name, acc)
    reports.write_json(start_path, dict(start_accuracy=acc))
  if not os.path.exists(metrics_path):
    train.train_and_evaluate(c, run_dir)
  return dict(
      _read(metrics_path),
      **_read(start_path),
      name=name,
      train_minutes=tables.train_minutes(run_dir),
  )
