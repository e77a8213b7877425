"""Shared grid parsing for the paper-table sweeps (configs/*_table.py).

Grid arguments use '+' between values, e.g. `kinds=sparse+random,seeds=3`.
With the trained attention-only model in the grid, each of its runs also gets
two compiled-UT runs (sparse and random, `compiled=false` drops them): the
trained model compiled into a fixed UT and evaluated with no gradient step.
A run's seed sets E's and U's initialisation, its data, and the frozen
weights (model.ut_seed = the seed): each random-UT seed is a new machine.
"""

import json
import math
import os

from configs import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KINDS = "sparse+random+trained"
VARIANTS = "attn+res_ln+res_ln_mlp"


def parse_grid(arg, **extra):
  args = common.parse_arg(
      arg,
      dict(
          kinds=KINDS,
          variants=VARIANTS,
          seeds=3,
          compiled=True,
          embed_scale=1.0,
          smoke=False,
          **extra,
      ),
  )
  for key in ("kinds", "variants"):
    args[key] = args[key].split("+")
  if args["seeds"] < 1:
    raise common.UserError(f"seeds={args['seeds']}; use 1 or more")
  return args


def more_seeds(add, finished, names, run_of_seed, args):
  """add() seeds args["seeds"] .. args["more_seeds"] - 1 of a cell (run_of_seed
  (seed) -> its run) once its first runs (`names`) are recorded and their
  validation accuracies spread by more than args["spread"] points. finished:
  the sweep's `finished(name)` (None: plan the first seeds only)."""
  if finished is None or args["more_seeds"] <= args["seeds"]:
    return
  recorded = [finished(n) for n in names]
  if any(m is None or m.get("eval_accuracy") is None for m in recorded):
    return
  accuracies = [100 * m["eval_accuracy"] for m in recorded]
  # A diverged seed (NaN) counts as a disagreement.
  if any(math.isnan(a) for a in accuracies) or (
      max(accuracies) - min(accuracies) > args["spread"]
  ):
    for seed in range(args["seeds"], args["more_seeds"]):
      add(run_of_seed(seed))


def still_rising(metrics, rise):
  """Whether a recorded run ended at its step cap with its validation curve
  still rising: more than `rise` points gained over the last fifth of the
  cap (DESIGN §8: a curve must flatten before the last step)."""
  cap = metrics["config"]["train"]["steps"]
  curve = metrics.get("curve") or []
  if metrics.get("stopped_early") or metrics.get("step", 0) < cap or not curve:
    return False
  before = [a for s, a in curve if s <= 0.8 * cap]
  return bool(before) and 100 * (curve[-1][1] - max(before)) > rise


def longer_runs(add, finished, names, run_of_seed, args):
  """add() every seed of a cell again at args["longer"] times its step cap
  once its first runs (`names`) are recorded and one of them ended at the cap
  still rising by more than args["rise"] points (`still_rising`). The longer
  runs are a row of their own (their cap differs) beside the capped one.
  finished: the sweep's `finished(name)` (None: plan the first runs only)."""
  if finished is None or args["longer"] <= 1:
    return
  recorded = [finished(n) for n in names]
  if any(m is None or "config" not in m for m in recorded):
    return
  if any(still_rising(m, args["rise"]) for m in recorded):
    cap = recorded[0]["config"]["train"]["steps"]
    for seed in range(len(names)):
      add(run_of_seed(seed), **{"train.steps": cap * args["longer"]})


def add_grid(add, args, axis, values, random_compiled_values=None):
  """add() one run per (axis value, kind, variant, seed) of the parsed grid,
  and compiled-UT runs: into the sparse UT for every axis value, into a random
  UT for those in random_compiled_values (default all)."""
  random_values = (
      values if random_compiled_values is None else random_compiled_values
  ).split("+")
  for value in values.split("+"):
    for kind in args["kinds"]:
      for variant in args["variants"]:
        for seed in range(args["seeds"]):
          run = (
              f"model={kind},variant={variant},{axis}={value},seed={seed}"
              + (
                  f",embed_scale={args['embed_scale']}"
                  if args["embed_scale"] != 1.0
                  else ""
              )
              + (",smoke" if args["smoke"] else "")
          )
          add(run)
          if args["compiled"] and (kind, variant) == ("trained", "attn"):
            # Compiled-UT rows: this trained model compiled into fixed UTs.
            add(run, compiled="sparse")
            if value in random_values:
              add(run, compiled="random")


def row_field(row, key):
  """row_field("model=random,variant=attn", "model") == "random"."""
  return dict(item.split("=") for item in row.split(","))[key]


def paper_rows(rows, args):
  """The rows (config arguments) whose kind and variant the grid keeps."""
  return [
      r
      for r in rows
      if row_field(r, "model") in args["kinds"]
      and row_field(r, "variant") in args["variants"]
  ]


def chosen(root, path, command):
  """The `chosen` list of a selection sweep's selection.json (root/path);
  a UserError naming `command`, the sweep that writes it, when it is
  missing."""
  full = os.path.join(root, path)
  if not os.path.exists(full):
    raise common.UserError(f"{path} is missing: run {command} first")
  with open(full) as f:
    return json.load(f)["chosen"]
