"""Choosing hyperparameters from a selection sweep's table (validation seeds).

`choose(rows, keys)` groups a sweep's aggregate rows (ut/experiments/sweep.py)
into cells by `keys` (e.g. kind, variant, data) and picks in each the row
that does best on the validation set: the most runs ending at >= 99%
(`successes`), then the fewest median steps to 99%, then the highest mean
validation accuracy. The chosen row's hyperparameters are the cell's.
"""

import json
import math
import os

from ut.io import reports
from ut.training import train


def _rank(row):
  median = row.get("median_steps_to_99")
  mean = row["accuracy_mean"]
  return (
      -row["successes"],
      math.inf if median is None else median,
      -(mean if not math.isnan(mean) else -math.inf),
  )


def choose(rows, keys=("kind", "variant", "data")):
  """[(cell, chosen row, the cell's rows best first)] in first-seen order."""
  cells = {}
  for row in rows:
    cells.setdefault(tuple(row[k] for k in keys), []).append(row)
  return [
      (cell, ranked[0], ranked)
      for cell, ranked in (
          (cell, sorted(members, key=_rank)) for cell, members in cells.items()
      )
  ]


def markdown(choices, params):
  """A table: each cell's candidates, best first, the chosen one marked; m is
  the model's width, part of the cell.

  params: {column: function of a row}, the hyperparameters shown."""
  out = []
  for cell, best, ranked in choices:
    for row in ranked:
      data = json.loads(row["data"]) if isinstance(row["data"], str) else {}
      out.append(
          dict(
              chosen="*" if row is best else "",
              kind=row["kind"],
              variant=row["variant"],
              m=row["width"],
              **{k: v for k, v in data.items() if k in ("k", "mix")},
              **{name: get(row) for name, get in params.items()},
              seeds=row["seeds"],
              **{"≥99%": row["successes"]},
              median_step_to_99=row.get("median_steps_to_99"),
              accuracy=f"{100 * row['accuracy_mean']:.2f}",
          )
      )
    del cell
  return reports.format_table(out)


def report(workdir, rows, cost=""):
  """selection.md and selection.json in a selection sweep's workdir: per cell
  (kind, variant, data, and model width), the lr, schedule and embed_scale
  chosen; cost: a line under the table (`sweep.cost_note`)."""
  for row in rows:  # Read embed_scale and the schedule from a run's config.
    name = row["runs"].split(";")[0]
    with open(os.path.join(workdir, "runs", name, "metrics.json")) as f:
      config = json.load(f)["config"]
    row["embed_scale"] = config["model"]["embed_scale"]
    # Runs recorded before the field existed: its default then (stored_config).
    row["schedule"] = train.stored_config(config)["train"]["schedule"]
  choices = choose(rows, ("kind", "variant", "width", "data"))
  params = dict(
      lr=lambda r: r["lr"],
      schedule=lambda r: r["schedule"],
      embed_scale=lambda r: r["embed_scale"],
  )
  reports.write_markdown(
      os.path.join(workdir, "selection.md"), markdown(choices, params), cost
  )
  reports.write_json(
      os.path.join(workdir, "selection.json"),
      dict(
          chosen=[
              dict(
                  kind=best["kind"],
                  variant=best["variant"],
                  width=best["width"],
                  data=json.loads(best["data"]),
                  lr=best["lr"],
                  schedule=best["schedule"],
                  embed_scale=best["embed_scale"],
                  successes=best["successes"],
                  seeds=best["seeds"],
                  accuracy_mean=best["accuracy_mean"],
              )
              for _, best, _ in choices
          ],
          provenance=reports.provenance(),
      ),
  )
