"""Choosing hyperparameters from a selection sweep's table (validation seeds).

`choose(rows, keys)` groups a sweep's aggregate rows
(ut/experiments/sweep/tables.py) into cells by `keys` (e.g. kind, variant,
data) and picks in each the row that does best on the validation set: the most
runs ending at >= 99% (`successes`), then the fewest training strings to 99%
(the median step at which the runs first reached it times the row's batch size,
where the row has one), then the highest mean validation accuracy. The chosen
row's hyperparameters are the cell's.
"""

import json
import math
import os

from ut.io import reports


def _strings_to_99(row):
  """Median training strings to 99%: the median step times the batch size."""
  median = row.get("median_steps_to_99")
  return None if median is None else median * row.get("batch_size", 1)


def _rank(row):
  strings = _strings_to_99(row)
  mean = row["accuracy_mean"]
  return (
      -row["successes"],
      math.inf if strings is None else strings,
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
              **(
                  {"median strings to 99%": _strings_to_99(row)}
                  if "batch_size" in row
                  else {}
              ),
              accuracy=f"{100 * row['accuracy_mean']:.2f}",
          )
      )
    del cell
  return reports.format_table(out)


def report(workdir, rows, cost=""):
  """selection.md and selection.json in a selection sweep's workdir: per cell
  (kind, variant, data, and model width), the lr, schedule and embed_scale
  chosen, with the batch size and warm-up steps; cost: a line under the
  table (`sweep.cost_note`)."""
  for row in rows:  # Read the hyperparameters from a run's config.
    name = row["runs"].split(";")[0]
    with open(os.path.join(workdir, "runs", name, "metrics.json")) as f:
      config = json.load(f)["config"]
    row["embed_scale"] = config["model"]["embed_scale"]
    train_ = config["train"]
    row["schedule"] = train_["schedule"]
    row["batch_size"] = train_["batch_size"]
    row["warmup_steps"] = train_["warmup_steps"]
  choices = choose(rows, ("kind", "variant", "width", "data"))
  params = dict(
      lr=lambda r: r["lr"],
      schedule=lambda r: r["schedule"],
      embed_scale=lambda r: r["embed_scale"],
      batch=lambda r: r["batch_size"],
      warmup=lambda r: r["warmup_steps"],
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
                  batch_size=best["batch_size"],
                  warmup_steps=best["warmup_steps"],
                  successes=best["successes"],
                  seeds=best["seeds"],
                  accuracy_mean=best["accuracy_mean"],
              )
              for _, best, _ in choices
          ],
          provenance=reports.provenance(),
      ),
  )
