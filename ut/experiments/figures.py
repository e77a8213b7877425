"""The figures and extra tables a sweep writes beside table.md, by name.

A config file names its report as data, `REPORT = "width"`; it imports none of
this. `launch.sweep` calls `write(module, workdir, rows, cost)` after the
table: REPORTS[module.REPORT](workdir, rows, cost=cost, config=module), where
rows are the sweep's aggregate rows (ut/experiments/sweep/tables.py), cost a
line under the table (`sweep.cost_note`) and config the config module, whose
data (e.g. configs/width.py's `threshold`) a report may read.
"""

import glob
import json
import os
import types

import numpy as np

from ut.errors import UserError
from ut.experiments import dyck_protocol
from ut.experiments import selection
from ut.experiments.sweep import tables
from ut.io import plots
from ut.io import reports


def _run_metrics(workdir, name):
  with open(os.path.join(workdir, "runs", name, "metrics.json")) as f:
    return json.load(f)


def dyck_breakdown(workdir, rows, cost="", config=None):
  """breakdown.md and breakdown.json: each row's test accuracy (seed mean, %)
  by length bucket, by subset and on the short balanced strings, beside the
  counting baseline on the same test set (ut.experiments.dyck_protocol).
  cost is unused: paper.md carries the table's cost line."""
  del cost, config
  by_row = {}
  for r in rows:
    data = json.loads(r["data"])
    label = f"{r['kind']} {r['variant']} m={r['width']}"
    if (data["mix"], label) in by_row:  # The same row at another lr.
      label += f" lr={r['lr']}"
    for name in r["runs"].split(";"):
      by_row.setdefault((data["mix"], label), []).append(
          _run_metrics(workdir, name)
      )
  by_mix = dyck_protocol.table_breakdowns(by_row)
  if not by_mix:  # No run scored on a test set yet.
    return
  reports.write_json(
      os.path.join(workdir, "breakdown.json"),
      dict(mixes=by_mix, provenance=reports.provenance()),
  )
  text = []
  for mix, columns in by_mix.items():
    text.append(
        f"Test set of mix {mix}: accuracy (%, mean over each row's seeds) "
        "by part, the counting baseline first\n"
    )
    text.append(
        reports.format_table(dyck_protocol.breakdown_rows(columns)) + "\n"
    )
  reports.write_text(os.path.join(workdir, "breakdown.md"), "\n".join(text))


def _reuse_note(workdir):
  """A line naming the runs copied from another sweep's run of the identical
  config (their metrics.json's `reused_from`), or ""."""
  sources = []
  for path in sorted(
      glob.glob(os.path.join(workdir, "runs", "*", "metrics.json"))
  ):
    with open(path) as f:
      source = json.load(f).get("reused_from")
    if source:
      sources.append(os.path.dirname(source))
  if not sources:
    return ""
  return (
      f"{len(sources)} runs are copies of runs of the identical config in "
      f"{', '.join(sorted(set(sources)))} (their metrics.json's reused_from):"
      " the sweep checks the config of every recorded run and trains none"
      " of them again."
  )


def width(workdir, rows, cost="", config=None):
  """width.{json,md,png}: accuracy and successes against m / N (N:
  config.threshold(cell), configs/width.py's). The accuracy is on the test
  set where the runs have one (validation otherwise); a seed succeeds at
  >= 99% on validation, as in the tables. cost: a line under the table;
  last, the planned runs not yet finished, with their latest evaluation
  (`ut.experiments.sweep.unfinished_note`)."""
  points = []
  for r in rows:
    data = json.loads(r["data"])
    cell = "dyck" if "mix" in data else f"khop{data['k']}"
    n = config.threshold(cell)
    mean, std, held_out = plots.held_out_accuracy(r)
    points.append(
        dict(
            cell=cell,
            m=r["width"],
            N=n,
            ratio=r["width"] / n,
            lr=r["lr"],
            held_out=held_out,
            accuracy_mean=mean,
            accuracy_std=std,
            successes=r["successes"],
            seeds=r["seeds"],
        )
    )
  points.sort(key=lambda p: (p["cell"], p["ratio"]))
  reports.write_json(
      os.path.join(workdir, "width.json"),
      dict(points=points, provenance=reports.provenance()),
  )
  table = [
      {
          "cell": p["cell"],
          "m": p["m"],
          "N": p["N"],
          "m / N": f"{p['ratio']:.3g}",
          "lr": p["lr"],
          "held out": p["held_out"],
          "accuracy (%)": reports.mean_std(
              p["accuracy_mean"], p["accuracy_std"]
          ),
          "≥99% (validation)": f"{p['successes']}/{p['seeds']}",
      }
      for p in points
  ]
  reports.write_markdown(
      os.path.join(workdir, "width.md"),
      reports.format_table(table),
      cost,
      _reuse_note(workdir),
      tables.unfinished_note(workdir),
  )
  plots.against_width(points).savefig(os.path.join(workdir, "width.png"))


def spread(results: list[dict]) -> dict:
  """{mean, between_machines, between_programs, per_machine} of runs'
  metrics dicts (each with config.model.ut_seed and eval_accuracy)."""
  by_draw = {}
  for r in results:
    by_draw.setdefault(r["config"]["model"]["ut_seed"], []).append(
        r["eval_accuracy"]
    )
  means = [np.mean(v) for v in by_draw.values()]
  within = [np.std(v, ddof=1) for v in by_draw.values() if len(v) > 1]
  return dict(
      mean=float(np.mean([a for v in by_draw.values() for a in v])),
      between_machines=float(np.std(means, ddof=1)) if len(means) > 1 else None,
      between_programs=float(np.mean(within)) if within else None,
      per_machine={str(k): v for k, v in sorted(by_draw.items())},
  )


def machines(workdir, rows, cost="", config=None):
  """machines.json and machines.md from the finished runs of each row
  (`spread`); cost: a line under the table."""
  del config
  out = []
  for row in rows:
    results = [_run_metrics(workdir, n) for n in row["runs"].split(";")]
    out.append(
        dict(task=row["task"], variant=row["variant"], **spread(results))
    )
  reports.write_json(
      os.path.join(workdir, "machines.json"),
      dict(cells=out, provenance=reports.provenance()),
  )
  pct = lambda v: "" if v is None else f"{100 * v:.2f}"
  table = reports.format_table(
      [
          {
              "task": c["task"],
              "variant": c["variant"],
              "mean (%)": pct(c["mean"]),
              "std between machines": pct(c["between_machines"]),
              "std between programs": pct(c["between_programs"]),
              "runs (per draw)": " | ".join(
                  ", ".join(f"{100 * a:.1f}" for a in v)
                  for v in c["per_machine"].values()
              ),
          }
          for c in out
      ]
  )
  reports.write_markdown(os.path.join(workdir, "machines.md"), table, cost)


def _selection(workdir, rows, cost="", config=None):
  del config
  selection.report(workdir, rows, cost)


# The reports a config may name (REPORT = "<name>"), by name.
REPORTS = {
    "dyck_breakdown": dyck_breakdown,
    "machines": machines,
    "selection": _selection,  # selection.{md,json} (ut/experiments/selection.py).
    "width": width,
}


def write(
    module: types.ModuleType, workdir: str, rows: list[dict], cost: str = ""
) -> None:
  """Writes the report the config module names (module.REPORT), if any."""
  name = getattr(module, "REPORT", None)
  if name is None:
    return
  if name not in REPORTS:
    raise UserError(f"REPORT = {name!r}; use one of {', '.join(REPORTS)}")
  REPORTS[name](workdir, rows, cost=cost, config=module)
