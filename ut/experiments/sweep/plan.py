"""A sweep's plan: the runs a config file's sweep(add) adds, and their groups.

A config file may define `sweep(add)`; each `add(arg, **overrides)` is one run:
`get_config(arg)` with dotted-field overrides. Runs whose configs differ only
in BATCHED_KEYS share every shape and can train as one vmapped group
(`group_key`) where `use_vmap` says groups are vmapped; `work_units` says
what one process trains at a time.
"""

import functools
import importlib.util
import inspect
import json
import os
import re
import types

import jax
import ml_collections

from ut.errors import UserError
from ut.experiments.sweep import records
from ut.experiments.sweep import rules
from ut.training import optimizer

BATCHED_KEYS = ("seed", "train.lr", "model.ut_seed")
# Compiled-UT runs join the group of the model they compile, after it trains.
GROUPED_KEYS = BATCHED_KEYS + ("compiled",)

Run = records.Run


def load_config_module(path: str) -> types.ModuleType:
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


def config_arg(config_path: str) -> str | None:
  """The argument of a config path ('configs/dyck_table.py:smoke' -> 'smoke'),
  or None where it has none."""
  return config_path.split(":", 1)[1] if ":" in config_path else None


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


def collect_runs(
    module: types.ModuleType,
    arg: str | None = None,
    workdir: str | None = None,
    overrides: dict | None = None,
) -> list[Run]:
  """[(name, config)] from the module's sweep(add) (or sweep(add, arg)).

  overrides: {dotted field: value} set in every run's config, its name
  unchanged (e.g. {"eval.test_each": True}: `launch.sweep --test_each`).

  add() returns the run's name. A sweep that takes a keyword `adapt` is
  passed `rules.adapter`'s adapt(rule, ...), which applies a named rule of
  ut/experiments/sweep/rules.py (e.g. more seeds where the first ones
  disagree); one that takes a keyword `finished` is passed `finished(name)`
  itself: that run's recorded metrics in `workdir` (a dict), or None while it
  is not recorded. `run_sweep` collects again after a pass that trained
  something, until no run is added. The plan must only grow as results come
  in. With several JAX processes `finished` always says None (every process
  must plan the same runs).
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
  finished = functools.partial(records.recorded_metrics, workdir)
  parameters = inspect.signature(module.sweep).parameters
  if "finished" in parameters:
    kwargs["finished"] = finished
  if "adapt" in parameters:
    kwargs["adapt"] = rules.adapter(add, finished)
  if arg is None:
    module.sweep(add, **kwargs)
  else:
    module.sweep(add, arg, **kwargs)
  for name, config in runs:  # Fail before training anything.
    try:
      optimizer.check_schedule(config)
    except UserError as e:
      raise UserError(f"run {name}: {e}") from None
  names = [n for n, _ in runs]
  if len(set(names)) != len(names):
    raise UserError("sweep(add) added the same run twice")
  return runs


def group_key(config: ml_collections.ConfigDict) -> str:
  """Runs with equal keys share every shape and can be vmapped together."""
  c = json.loads(config.to_json_best_effort())
  for dotted in GROUPED_KEYS:
    *parents, leaf = dotted.split(".")
    node = c
    for p in parents:
      node = node.get(p, {})
    node.pop(leaf, None)
  return json.dumps(c, sort_keys=True)


def shape_groups(runs: list[Run]) -> list[list[Run]]:
  """The runs by `group_key`, in the order of their first run."""
  groups = {}
  for name, config in runs:
    groups.setdefault(group_key(config), []).append((name, config))
  return list(groups.values())


def use_vmap(batching: str) -> bool:
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


def work_units(groups: list[list[Run]], vmapped: bool) -> list[list[Run]]:
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
        by_target.setdefault(target_json(config), []).append((name, config))
    for name, config in members:
      if not config.get("compiled"):
        units.append(
            [(name, config)] + by_target.pop(config.to_json_best_effort(), [])
        )
    # Compiled-UT runs whose target is not in the sweep: each on its own.
    units.extend([run] for runs in by_target.values() for run in runs)
  return units


def target_json(config: ml_collections.ConfigDict) -> str:
  """The config of the model a compiled-UT run compiles, as JSON."""
  target = config.copy_and_resolve_references()
  target.compiled = ""
  return target.to_json_best_effort()
