"""Each row's status at each budget against the paper, and each claim's verdict.

The rule is in ut/experiments/budget/__init__.py.
"""

from ut.experiments.budget import cells as cells_lib
from ut.io import plots

TOLERANCE = 2.0  # Points beside the paper's number or range that match it.


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
  if min(compared) >= cells_lib.SUCCESS:  # It and every compared row.
    return "ceiling"
  return "miss"


def _span(chosen, present):
  """Budgets `chosen` of the ordered `present` ones, as words: '<= 64k'
  (a prefix), '>= 640k' (a suffix), else listed."""
  names = [cells_lib.strings(b) for b in chosen]
  if len(chosen) < len(present):
    if chosen == present[: len(chosen)]:
      return f"<= {names[-1]} strings"
    if chosen == present[-len(chosen) :]:
      return f">= {names[0]} strings"
  return ", ".join(names) + " strings"


def verdict(statuses: dict, protocol: str = "") -> str:
  """One sentence from {budget: 'match' | 'miss' | 'ceiling' | None}, e.g.
  'reproduced at <= 64k strings, not at >= 640k strings under protocol
  khop' (without its last words where `protocol` is empty)."""
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
    rows: list[dict],
    budgets=cells_lib.BUDGETS,
    paper=None,
    carry=cells_lib.CARRY,
) -> list[dict]:
  """Each row with its paper text, band, and cells {budget: `cell`}."""
  out = []
  for row in rows:
    text = paper_of(paper or {}, row)
    cells = {b: cells_lib.cell(row["runs"], b, carry) for b in budgets}
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


def judge(group: dict, budgets=cells_lib.BUDGETS) -> dict:
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


def rule(carry=cells_lib.CARRY) -> str:
  """The rule for carried-forward and missing values, in words."""
  carried = " or ".join(f"the {c} rule ({cells_lib.MARKS[c]})" for c in carry)
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
      + (
          ", or stopped by another rule,"
          if set(carry) != set(cells_lib.MARKS)
          else ""
      )
      + " counts nothing at B: the cell says how many seeds it has; nothing"
      " is extrapolated. Cell: mean ± std [per-seed minimum] seeds at >="
      f" {100 * cells_lib.SUCCESS:.0f}% validation / seeds with a value. A row matches"
      f" the paper at B when its mean is within {TOLERANCE:g} points of the"
      " paper's number or range; one that does not is at the ceiling at B"
      f" when it and every compared row of its claim are >="
      f" {100 * cells_lib.SUCCESS:.0f}% there. Only cells in which"
      " every seed has a value are judged."
  )
