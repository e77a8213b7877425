"""Result rows set beside the paper's numbers: a text table (`beside_paper`)
and the fields of a row that the plots read."""

import json
import math
import re

from ut.io import reports


def panel_value(row, panel):
  """The row's data field `panel` (e.g. 'mix' or 'k')."""
  return json.loads(row["data"])[panel]


def paper_range(text):
  """'85.7-96.1' -> (85.7, 96.1), 'about 99' -> (99, 99), 'about the same' -> None."""
  numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text or "")]
  return (min(numbers), max(numbers)) if numbers else None


def beside_paper(rows, paper, panel):
  """A text table: panel, kind, variant, width m, seeds, the held-out set
  reported (the test set where the runs have one, else validation), ours
  (mean ± std %), paper (%), where the runs scored the test set at each
  evaluation its mean ± std at their best validation (`test_at_best_valid`),
  the seeds at >= 99% on validation and the
  median step at which they first were, the latest step a seed ended at
  beside the runs' step cap, and for compiled-UT rows the lowest agreement
  with the target (%)."""
  out = []
  for r in rows:
    mean, std, held_out = held_out_accuracy(r)
    ours = reports.mean_std(mean, std)
    out.append(
        {
            panel: panel_value(r, panel),
            "kind": r["kind"],
            "variant": r["variant"],
            "m": r.get("width") or "",
            "seeds": r["seeds"],
            "held out": held_out,
            "ours": ours,
            "paper": _paper(
                paper, panel_value(r, panel), r["kind"], r["variant"]
            ),
        }
    )
    if any("test_best_mean" in x for x in rows):  # launch.sweep --test_each.
      out[-1]["test at best valid"] = (
          reports.mean_std(r["test_best_mean"], r["test_best_std"])
          if "test_best_mean" in r
          else ""
      )
    if any("successes" in x for x in rows):
      out[-1]["≥99% (validation)"] = (
          f"{r['successes']}/{r['seeds']}" if "successes" in r else ""
      )
    if any(x.get("median_steps_to_99") is not None for x in rows):
      out[-1]["median step to 99%"] = reports.step(r.get("median_steps_to_99"))
    if any("cap" in x for x in rows):  # Training runs: where they stopped.
      out[-1]["last step / cap"] = (
          f"{r['max_steps']} / {r['cap']}" if "cap" in r else ""
      )
    if any(x.get("agreement_min") is not None for x in rows):  # Compiled rows.
      a = r.get("agreement_min")
      out[-1]["agreement (min)"] = "" if a is None else f"{100 * a:.2f}"
  return reports.format_table(out)


def held_out_accuracy(row):
  """(mean, std, "test") on the test set where a table row's runs have one,
  else (accuracy_mean, accuracy_std, "validation")."""
  test = row.get("test_mean")
  if test is not None and not math.isnan(test):
    return test, row.get("test_std"), "test"
  return row["accuracy_mean"], row["accuracy_std"], "validation"


def _paper(paper, value, kind, variant):
  return paper.get((value, kind, variant), paper.get((kind, variant), ""))


def _ordered(values):
  return list(dict.fromkeys(values))
