"""Adaptive-sweep rules: the runs a sweep adds once others are recorded.

A config names a rule as data; it imports none of this. Its sweep takes a
keyword `adapt` and, per cell, calls

  adapt("more_seeds", names, run_of_seed, args)

names: the cell's first runs (what add() returned); run_of_seed(seed): the
config argument of the cell's run at that seed; args: the parsed grid, with
the rule's settings. `collect_runs` passes `adapt` (`adapter`), bound to the
sweep's add() and to `finished(name)`: the run's recorded metrics in the
workdir, or None while it is not recorded (then the rule adds nothing). A
config called without it (adapt=None) plans its first runs only.
"""

import math
from typing import Callable

from ut.errors import UserError

Finished = Callable[[str], dict | None]


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


def still_rising(metrics: dict, rise: float) -> bool:
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


# The rules a config may name, by name.
RULES = {"more_seeds": more_seeds, "longer_runs": longer_runs}


def adapter(add: Callable, finished: Finished | None) -> Callable:
  """The `adapt(rule, names, run_of_seed, args)` that a config's sweep is
  passed: RULES[rule] with the sweep's add() and `finished`."""

  def adapt(rule, names, run_of_seed, args):
    if rule not in RULES:
      raise UserError(
          f"adaptive rule {rule!r}; use one of {', '.join(RULES)}"
      )
    RULES[rule](add, finished, names, run_of_seed, args)

  return adapt
