"""A sweep's runs, their rows of seeds and each row's cell at a budget.

A run's value at B strings is `value_at`'s; a row's cell at B is `cell`'s
(ut/experiments/budget/__init__.py has the rule).
"""

import glob
import json
import os

import numpy as np

from ut.errors import UserError
from ut.experiments.sweep import tables
from ut.io import reports

BUDGETS = (64_000, 160_000, 640_000, 3_200_000)  # Strings seen.
CARRY = ("success", "plateau")  # Early stops whose last value carries.
SUCCESS = tables.SUCCESS  # Validation accuracy that counts as a success.
VARIANTS = ("attn", "res_ln", "res_ln_mlp")
KINDS = ("sparse", "random", "trained")
MARKS = {"success": "†", "plateau": "‡"}
MISSING = {  # Why a seed has no value at a budget (`value_at`'s flags).
    "capped": "ended at the cap",
    "no eval": "no evaluation yet",
    "success": "stopped (success)",
    "plateau": "stopped (plateau)",
}


def strings(budget: float) -> str:
  """64000 -> '64k', 3200000 -> '3.2M'."""
  for size, unit in ((1e6, "M"), (1e3, "k")):
    if budget >= size:
      return f"{budget / size:.3g}{unit}"
  return f"{budget:g}"


def _stop(reason):
  """The rule a run's `stopped_early` names: 'success', 'plateau' or None."""
  if not reason:
    return None
  return "plateau" if reason.startswith("plateau") else "success"


def source_names(folders: list[str]) -> list[str]:
  """Each sweep folder's name for the tables: its path below the folders'
  common parent (results/khop, results/khop/batch: khop, khop/batch)."""
  paths = [os.path.normpath(os.path.abspath(f)) for f in folders]
  parent = os.path.dirname(os.path.commonpath(paths))
  return [os.path.relpath(p, parent) for p in paths]


def read_runs(folder: str, source: str | None = None) -> list[dict]:
  """The trained runs of a sweep folder (those with a validation curve;
  compiled-UT runs have none), each as a dict: name, source (`source`, by
  default the folder's name), config, batch, curve [(strings, accuracy)], seen (strings trained)
  and stop ('success', 'plateau' or None). UserError when the folder has
  no runs/ or no run with a curve."""
  paths = sorted(glob.glob(os.path.join(folder, "runs", "*", "metrics.json")))
  if not os.path.isdir(os.path.join(folder, "runs")) or not paths:
    raise UserError(f"{folder} has no runs/*/metrics.json; name a sweep folder")
  runs = []
  for path in paths:
    with open(path) as f:
      m = json.load(f)
    if not m.get("curve") or m.get("config", {}).get("compiled"):
      continue
    batch = m["config"]["train"]["batch_size"]
    curve = [(s * batch, a) for s, a in m["curve"]]
    runs.append(
        dict(
            name=m["name"],
            source=source or os.path.basename(os.path.normpath(folder)),
            config=m["config"],
            model_width=m.get("model_width"),
            batch=batch,
            curve=curve,
            seen=max(m.get("step", 0) * batch, curve[-1][0]),
            stop=_stop(m.get("stopped_early")),
        )
    )
  if not runs:
    raise UserError(f"{folder} has no trained run with a validation curve")
  return runs


def _cell_key(config):
  """A run's config without its seeds and host settings: runs with equal keys
  are seeds of one row (as tables.aggregate groups them)."""
  c = json.loads(json.dumps(config))
  c.pop("seed", None)
  c.pop("cpu", None)
  c.get("model", {}).pop("ut_seed", None)
  return json.dumps(c, sort_keys=True)


def group_rows(runs: list[dict], panel: str) -> list[dict]:
  """Rows of seeds (`_cell_key`), per source, in a stable order: panel value
  (data[panel]), variant, kind, m, batch, warm-up, cap. Each row: panel,
  kind, variant, m, batch, warmup, cap (strings), source, runs."""
  cells = {}
  for r in runs:
    cells.setdefault((r["source"], _cell_key(r["config"])), []).append(r)
  rows = []
  for (source, _), members in cells.items():
    c = members[0]["config"]
    model = c["model"]
    rows.append(
        dict(
            panel=c["data"].get(panel),
            kind=model["kind"],
            variant=model["variant"],
            m=members[0]["model_width"],
            batch=members[0]["batch"],
            warmup=c["train"]["warmup_steps"],
            cap=c["train"]["steps"] * members[0]["batch"],
            source=source,
            runs=members,
        )
    )
  return sorted(rows, key=_order)


def _order(row):
  index = lambda xs, x: xs.index(x) if x in xs else len(xs)
  return (
      str(row["panel"]),
      index(VARIANTS, row["variant"]),
      index(KINDS, row["kind"]),
      row["m"] or 0,
      row["batch"],
      row["warmup"],
      row["cap"],
      row["source"],
  )


def value_at(run: dict, budget: float, carry=CARRY) -> tuple:
  """(accuracy or None, flag): the run's validation accuracy at `budget`
  strings. Flags: 'reached' (it trained B strings), 'success' or 'plateau'
  (it stopped by that rule before B and `carry` names it: its last value),
  'capped' (it ended at its cap before B, or stopped by a rule `carry` does
  not name), 'no eval' (no evaluation at or before B)."""
  before = [a for s, a in run["curve"] if s <= budget]
  if run["seen"] >= budget:
    return (before[-1], "reached") if before else (None, "no eval")
  if run["stop"] in carry:
    return run["curve"][-1][1], run["stop"]
  return None, run["stop"] or "capped"


def cell(runs: list[dict], budget: float, carry=CARRY) -> dict:
  """A row's cell at `budget`: seeds (all), n (with a value), mean, std
  (ddof=1), min, successes (>= SUCCESS), values [(run name, accuracy,
  flag)], and flags {flag: count} for the carried and missing seeds."""
  values = [(r["name"], *value_at(r, budget, carry)) for r in runs]
  accs = np.array([a for _, a, _ in values if a is not None])
  flags = {}
  for _, _, flag in values:
    if flag != "reached":
      flags[flag] = flags.get(flag, 0) + 1
  return dict(
      budget=budget,
      seeds=len(runs),
      n=len(accs),
      mean=float(accs.mean()) if len(accs) else None,
      std=tables.std(accs) if len(accs) else None,
      min=float(accs.min()) if len(accs) else None,
      successes=int((accs >= SUCCESS).sum()),
      values=values,
      flags=flags,
  )


def cell_text(c: dict) -> str:
  """'98.65 ± 1.68 [96.70] 2/3': mean ± std [per-seed minimum] successes/n,
  'of <seeds>' where fewer seeds have a value, carried seeds as '(2†)';
  an empty cell names why: '— (3 ended at the cap)'."""
  if not c["n"]:
    why = ", ".join(f"{n} {MISSING[f]}" for f, n in sorted(c["flags"].items()))
    return f"— ({why})"
  text = f"{reports.mean_std(c['mean'], c['std'])} [{100 * c['min']:.2f}]"
  text += f" {c['successes']}/{c['n']}"
  if c["n"] < c["seeds"]:
    text += f" of {c['seeds']}"
  marks = [f"{c['flags'][f]}{m}" for f, m in MARKS.items() if f in c["flags"]]
  return text + (f" ({', '.join(marks)})" if marks else "")
