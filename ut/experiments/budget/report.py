"""The budget report: <out>/<task>.md, .json and .png (`run`)."""

import math
import os

from matplotlib import colormaps
from matplotlib import figure
import numpy as np

from ut.experiments.budget import cells as cells_lib
from ut.experiments.budget import verdicts
from ut.io import reports


def _label(row, rows):
  """kind variant m=..., with batch and warm-up where the panel's rows
  differ in them, and the cap in strings."""
  text = f"{row['kind']} {row['variant']} m={row['m']}"
  for field in ("batch", "warmup"):
    if len({r[field] for r in rows}) > 1:
      text += f" {field}={row[field]}"
  return text + f" cap {cells_lib.strings(row['cap'])}"


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
            **{
                cells_lib.strings(b): cells_lib.cell_text(r["cells"][b])
                for b in budgets
            },
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
    vals = [cells_lib.value_at(r, x, carry)[0] for r in row["runs"]]
    if all(v is not None for v in vals):
      out.append((x, 100 * np.mean(vals), 100 * min(vals), 100 * max(vals)))
  return tuple(zip(*out)) if out else ((), (), (), ())


def budget_figure(
    rows: list[dict], panel: str, budgets, carry=cells_lib.CARRY, title=""
):
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
  styles = dict(zip(cells_lib.VARIANTS, ("-", "--", ":")))
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
    text += f" ±{verdicts.TOLERANCE:g}: " + ", ".join(dict.fromkeys(names))
    top = min(hi + verdicts.TOLERANCE, 100.5)
    ax.axhspan(
        lo - verdicts.TOLERANCE, top, color=color, alpha=0.12, lw=0, label=text
    )
    lowest = min(lowest, lo - verdicts.TOLERANCE)
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
    budgets=cells_lib.BUDGETS,
    carry=cells_lib.CARRY,
    overwrite: bool = False,
) -> dict:
  """Writes out/<task>.md, .json and .png from the sweep folders `sources`
  (refusing to replace them unless `overwrite`); returns the JSON report."""
  names = cells_lib.source_names(sources)
  runs = [
      r
      for folder, name in zip(sources, names)
      for r in cells_lib.read_runs(folder, name)
  ]
  reports.check_folder(out, "--out")
  paths = [os.path.join(out, f"{task}.{ext}") for ext in ("md", "json", "png")]
  reports.refuse_existing(paths, overwrite, flag="--overwrite")
  rows = verdicts.table(
      cells_lib.group_rows(runs, panel), budgets, paper, carry
  )
  groups = [
      verdicts.judge(g, budgets) for g in verdicts.claim_groups(rows, claims)
  ]
  meta = dict(
      task=task,
      sources=list(sources),
      budgets=list(budgets),
      carry=list(carry),
      tolerance=verdicts.TOLERANCE,
      success=cells_lib.SUCCESS,
      rule=verdicts.rule(carry),
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
      f" ({', '.join(cells_lib.source_names(meta['sources']))})"
  )


def _footer(meta):
  """The rule and the provenance under the tables."""
  p = meta["provenance"]
  return (
      f"{meta['rule']}\n\nSources: {', '.join(meta['sources'])}. Budgets:"
      f" {', '.join(cells_lib.strings(b) for b in meta['budgets'])} strings. Git"
      f" commit {p['git_commit']}, JAX {p['jax_version']}; read from the"
      " committed run folders, no training."
  )
