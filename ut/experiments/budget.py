"""Accuracy at matched budgets, counted in strings seen (issue 48).

A sweep's run folders (<sweep>/runs/<run>/metrics.json, as launch.sweep
writes them) hold each run's validation curve [(step, accuracy)]. A run has
seen step * batch_size strings at a step, so runs at different batch sizes
and step caps compare at the same budget B strings:

  value at B: the last validation evaluation at or before B strings.
  A run that stopped early (by the success rule, flag "success", or by the
  plateau rule, flag "plateau", each if `carry` names it) before B counts
  at B with its last value, carried forward and marked. A run that ended at
  its step cap (or stopped by a rule `carry` does not name) before B counts
  nothing at B ("capped"); so does one with no evaluation by B ("no eval").
  Nothing is extrapolated.

Runs that differ only in their seeds (`seed`, `model.ut_seed`) form a row, as
in `ut.experiments.sweep.tables.aggregate`; a row's step cap is part of it. A row's
cell at B: mean ± std (ddof=1) over the seeds with a value, the per-seed
minimum, how many are >= tables.SUCCESS, and how many seeds have a value.

Verdicts: a row's mean matches the paper at B when it lies within the
paper's number or range widened by TOLERANCE points on each side. A row
that does not is "at the ceiling" at B when it and every other compared row
of its claim are >= SUCCESS: the task cannot tell the paper's gap (a range
below SUCCESS) from none there.
"""

import glob
import json
import math
import os

from matplotlib import colormaps
from matplotlib import figure
import numpy as np

from ut.errors import UserError
from ut.experiments.sweep import tables
from ut.io import plots
from ut.io import reports

BUDGETS = (64_000, 160_000, 640_000, 3_200_000)  # Strings seen.
CARRY = ("success", "plateau")  # Early stops whose last value carries.
TOLERANCE = 2.0  # Points beside the paper's number or range that match it.
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


def read_runs(folder: str) -> list[dict]:
  """The trained runs of a sweep folder (those with a validation curve;
  compiled-UT runs have none), each as a dict: name, source (the folder's
  name), config, batch, curve [(strings, accuracy)], seen (strings trained)
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
            source=os.path.basename(os.path.normpath(folder)),
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


def paper_of(paper: dict, row: dict) -> str:
  """The paper's text for a row: paper[(panel value, kind, variant)] or
  paper[(kind, variant)], as configs/*_table.py's PAPER; '' if none."""
  key = (row["kind"], row["variant"])
  return paper.get((row["panel"], *key), paper.get(key, ""))


def band(text: str):
  """(low, high) in percent from the paper's text ('85.7-96.1', 'about
  99'), or None where it names no number ('above res_ln')."""
  return plots.paper_range(text)


def status(mean: float, band_pct, compared: list[float]) -> str:
  """'match', 'ceiling' or 'miss' for a row's mean accuracy (in [0, 1]) at
  one budget against the paper's (low, high) percent; `compared`: the means
  of every compared row of its claim (itself included)."""
  low, high = band_pct
  if low - TOLERANCE <= 100 * mean <= high + TOLERANCE:
    return "match"
  if min(compared) >= SUCCESS:  # It and every compared row.
    return "ceiling"
  return "miss"


def _span(chosen, present):
  """Budgets `chosen` of the ordered `present` ones, as words: '<= 64k'
  (a prefix), '>= 640k' (a suffix), else listed."""
  names = [strings(b) for b in chosen]
  if len(chosen) < len(present):
    if chosen == present[: len(chosen)]:
      return f"<= {names[-1]} strings"
    if chosen == present[-len(chosen) :]:
      return f">= {names[0]} strings"
  return ", ".join(names) + " strings"


def verdict(statuses: dict, protocol: str = "") -> str:
  """One sentence from {budget: 'match' | 'miss' | 'ceiling' | None}, e.g.
  'reproduced at <= 64k strings, not at >= 640k strings under protocol
  khop_v2' (without its last words where `protocol` is empty)."""
  present = sorted(b for b, s in statuses.items() if s)
  pick = lambda s: [b for b in present if statuses[b] == s]
  match, miss, ceiling = pick("match"), pick("miss"), pick("ceiling")
  where = f" under protocol {protocol}" if protocol else ""
  if not present:
    return f"untested: no runs at these budgets{where}"
  if len(ceiling) == len(present):
    at = _span(ceiling, present)
    return f"untested: every row at the ceiling at {at}{where}"
  if len(match) == len(present):
    return f"reproduced at {_span(match, present)}{where}"
  if not match:
    text = f"not reproduced at {_span(miss, present)}" if miss else ""
  else:
    text = f"reproduced at {_span(match, present)}"
    text += f", not at {_span(miss, present)}" if miss else ""
  if ceiling:
    text += f"; untested (ceiling) at {_span(ceiling, present)}"
  return f"{text.lstrip('; ')}{where}"


def _setting(row):
  """A row's setting apart from its step cap: a capped row and its longer
  rerun are one setting."""
  return tuple(row[f] for f in ("kind", "variant", "m", "batch", "warmup"))


def table(
    rows: list[dict], budgets=BUDGETS, paper=None, carry=CARRY
) -> list[dict]:
  """Each row with its paper text, band, and cells {budget: `cell`}."""
  out = []
  for row in rows:
    text = paper_of(paper or {}, row)
    cells = {b: cell(row["runs"], b, carry) for b in budgets}
    out.append(dict(row, paper=text, band=band(text), cells=cells))
  return out


def claim_groups(rows: list[dict], claims: dict) -> list[dict]:
  """{claim, panel, source, rows}: the rows of each claim ({name: variants})
  per panel value and source that have a paper number."""
  groups = {}
  for row in rows:
    for name, variants in claims.items():
      if row["variant"] in variants and row["band"]:
        key = (name, row["panel"], row["source"])
        groups.setdefault(key, []).append(row)
  return [
      dict(claim=c, panel=p, source=s, rows=members)
      for (c, p, s), members in groups.items()
  ]


def _complete(c):
  """Whether every seed of a cell has a value: only such cells are judged
  (the seeds that stopped early are not a fair sample of the row)."""
  return c["n"] and c["n"] == c["seeds"]


def _claim_status(group, budget):
  """The claim's status at one budget from its rows' (`judge`)."""
  present = [r for r in group["rows"] if _complete(r["cells"][budget])]
  if {_setting(r) for r in present} != set(map(_setting, group["rows"])):
    return None  # A setting of the claim has no value here.
  got = {r["statuses"][budget] for r in present}
  if got == {"match"}:
    return "match"
  return "ceiling" if got <= {"match", "ceiling"} else "miss"


def judge(group: dict, budgets=BUDGETS) -> dict:
  """Sets each row's statuses {budget: `status`, or None where a seed has
  no value (`_complete`)} and verdict, and
  the claim's: 'match' where every row matches, 'ceiling' where a row is at
  the ceiling and every other matches, 'miss' otherwise; None where a
  setting of the claim has no value at that budget. Returns the group."""
  for b in budgets:
    present = [r for r in group["rows"] if _complete(r["cells"][b])]
    compared = [r["cells"][b]["mean"] for r in present]
    for r in group["rows"]:
      c = r["cells"][b]
      r.setdefault("statuses", {})[b] = (
          status(c["mean"], r["band"], compared) if _complete(c) else None
      )
  for r in group["rows"]:
    r["verdict"] = verdict(r["statuses"])  # The row names its source.
  group["statuses"] = {b: _claim_status(group, b) for b in budgets}
  group["verdict"] = verdict(group["statuses"], group["source"])
  return group


def rule(carry=CARRY) -> str:
  """The rule for carried-forward and missing values, in words."""
  carried = " or ".join(f"the {c} rule ({MARKS[c]})" for c in carry)
  return (
      "Each run's value at B strings is its last validation evaluation at or"
      " before B (strings = step x batch size)."
      + (
          f" A run stopped by {carried} before B counts at B with its last"
          " value, carried forward."
          if carry
          else ""
      )
      + " A run that ended at its step cap before B"
      + (", or stopped by another rule," if set(carry) != set(MARKS) else "")
      + " counts nothing at B: the cell says how many seeds it has; nothing"
      " is extrapolated. Cell: mean ± std [per-seed minimum] seeds at >="
      f" {100 * SUCCESS:.0f}% validation / seeds with a value. A row matches"
      f" the paper at B when its mean is within {TOLERANCE:g} points of the"
      " paper's number or range; one that does not is at the ceiling at B"
      f" when it and every compared row of its claim are >="
      f" {100 * SUCCESS:.0f}% there. Only cells in which"
      " every seed has a value are judged."
  )


def _label(row, rows):
  """kind variant m=..., with batch and warm-up where the panel's rows
  differ in them, and the cap in strings."""
  text = f"{row['kind']} {row['variant']} m={row['m']}"
  for field in ("batch", "warmup"):
    if len({r[field] for r in rows}) > 1:
      text += f" {field}={row[field]}"
  return text + f" cap {strings(row['cap'])}"


def markdown(rows: list[dict], groups: list[dict], panel: str, budgets) -> str:
  """One table per panel value, then each claim's verdict."""
  blocks = []
  for value in dict.fromkeys(r["panel"] for r in rows):
    mine = [r for r in rows if r["panel"] == value]
    shown = [
        {
            "row": _label(r, mine),
            "source": r["source"],
            "paper": r["paper"],
            **{strings(b): cell_text(r["cells"][b]) for b in budgets},
            "verdict": r.get("verdict", ""),
        }
        for r in mine
    ]
    blocks.append(f"### {panel} = {value}\n\n" + reports.format_table(shown))
  lines = [
      f"- {g['claim']}, {panel} = {g['panel']} (rows: "
      + ", ".join(
          dict.fromkeys(f"{r['kind']} {r['variant']}" for r in g["rows"])
      )
      + f"): {g['verdict']}"
      for g in groups
  ]
  return "\n\n".join(blocks + ["### Verdicts\n\n" + "\n".join(lines)])


def _band_curve(row, carry):
  """(strings, mean, min, max) over the row's seeds at every evaluation
  where each seed has a value (`value_at`), in percent."""
  xs = sorted({s for r in row["runs"] for s, _ in r["curve"]})
  out = []
  for x in xs:
    vals = [value_at(r, x, carry)[0] for r in row["runs"]]
    if all(v is not None for v in vals):
      out.append((x, 100 * np.mean(vals), 100 * min(vals), 100 * max(vals)))
  return tuple(zip(*out)) if out else ((), (), (), ())


def budget_figure(rows: list[dict], panel: str, budgets, carry=CARRY, title=""):
  """Validation accuracy against strings seen (log axis), one panel per
  panel value (`_draw_panel`); the budgets as dotted lines. A matplotlib
  Figure, made without pyplot."""
  values = list(dict.fromkeys(r["panel"] for r in rows))
  fig = figure.Figure(
      figsize=(11, 0.6 + 3.6 * len(values)), layout="constrained"
  )
  axes = fig.subplots(len(values), 1, squeeze=False)[:, 0]
  for value, ax in zip(values, axes):
    lowest = _draw_panel(ax, [r for r in rows if r["panel"] == value], carry)
    for b in budgets:
      ax.axvline(b, color="grey", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylim(max(0, 5 * math.floor(lowest / 5) - 5), 101)
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"{panel} = {value}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  axes[-1].set_xlabel("strings seen (step x batch size)")
  fig.suptitle(title, fontsize=10)
  return fig


def _draw_panel(ax, rows, carry):
  """Per row the mean over seeds (line style by variant) with its min..max
  band; each paper number or range, widened by TOLERANCE, as a band in the
  colour of the first row it is given for, its rows named in the legend.
  Returns the lowest accuracy drawn (%)."""
  styles = dict(zip(VARIANTS, ("-", "--", ":")))
  bands, lowest = {}, 100.0
  for i, r in enumerate(rows):
    color = f"C{i % 10}" if len(rows) <= 10 else colormaps["tab20"](i % 20)
    xs, mean, low, high = _band_curve(r, carry)
    style = styles.get(r["variant"], "-")
    ax.plot(xs, mean, color=color, ls=style, lw=1.4, label=_label(r, rows))
    ax.fill_between(xs, low, high, color=color, alpha=0.15, lw=0)
    lowest = min([lowest, *low])
    if r["band"]:
      names = bands.setdefault(tuple(r["band"]), [color])
      names.append(f"{r['kind']} {r['variant']}")
  for (lo, hi), (color, *names) in bands.items():
    text = f"paper {lo:g}" + (f"-{hi:g}" if hi > lo else "")
    text += f" ±{TOLERANCE:g}: " + ", ".join(dict.fromkeys(names))
    top = min(hi + TOLERANCE, 100.5)
    ax.axhspan(lo - TOLERANCE, top, color=color, alpha=0.12, lw=0, label=text)
    lowest = min(lowest, lo - TOLERANCE)
  return lowest


def _jsonable(row):
  """A row for the JSON report: its runs by name, cells keyed by budget."""
  out = {k: v for k, v in row.items() if k != "runs"}
  out["runs"] = [r["name"] for r in row["runs"]]
  out["cells"] = {str(b): c for b, c in row["cells"].items()}
  out["statuses"] = {str(b): s for b, s in row.get("statuses", {}).items()}
  return out


def run(
    task: str,
    sources: list[str],
    out: str,
    *,
    panel: str,
    paper: dict,
    claims: dict,
    budgets=BUDGETS,
    carry=CARRY,
    overwrite: bool = False,
) -> dict:
  """Writes out/<task>.md, .json and .png from the sweep folders `sources`
  (refusing to replace them unless `overwrite`); returns the JSON report."""
  runs = [r for folder in sources for r in read_runs(folder)]
  reports.check_folder(out, "--out")
  paths = [os.path.join(out, f"{task}.{ext}") for ext in ("md", "json", "png")]
  reports.refuse_existing(paths, overwrite, flag="--overwrite")
  rows = table(group_rows(runs, panel), budgets, paper, carry)
  groups = [judge(g, budgets) for g in claim_groups(rows, claims)]
  meta = dict(
      task=task,
      sources=list(sources),
      budgets=list(budgets),
      carry=list(carry),
      tolerance=TOLERANCE,
      success=SUCCESS,
      rule=rule(carry),
      provenance=reports.provenance(),
  )
  report = dict(
      rows=[_jsonable(r) for r in rows],
      claims=[
          dict(
              g,
              rows=[_label(r, g["rows"]) for r in g["rows"]],
              statuses={str(b): s for b, s in g["statuses"].items()},
          )
          for g in groups
      ],
      **meta,
  )
  reports.write_json(paths[1], report)
  reports.write_markdown(
      paths[0], markdown(rows, groups, panel, budgets), _footer(meta)
  )
  fig = budget_figure(rows, panel, budgets, carry, title=_title(meta))
  fig.savefig(paths[2] + ".tmp", format="png", dpi=130)
  os.replace(paths[2] + ".tmp", paths[2])  # Atomic, as reports.write_*.
  return report


def _title(meta):
  return (
      f"{meta['task']}: validation accuracy against strings seen"
      f" ({', '.join(map(os.path.basename, meta['sources']))})"
  )


def _footer(meta):
  """The rule and the provenance under the tables."""
  p = meta["provenance"]
  return (
      f"{meta['rule']}\n\nSources: {', '.join(meta['sources'])}. Budgets:"
      f" {', '.join(strings(b) for b in meta['budgets'])} strings. Git"
      f" commit {p['git_commit']}, JAX {p['jax_version']}; read from the"
      " committed run folders, no training."
  )
