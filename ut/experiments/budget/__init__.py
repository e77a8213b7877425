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

The modules, in the order data flows through them:
  cells.py     a sweep's runs, their rows of seeds, a row's cell at a budget
  verdicts.py  each row's status against the paper, each claim's verdict
  report.py    `run`: <out>/<task>.md, .json and .png
"""

from ut.experiments.budget.cells import BUDGETS
from ut.experiments.budget.cells import CARRY
from ut.experiments.budget.cells import cell
from ut.experiments.budget.cells import cell_text
from ut.experiments.budget.cells import group_rows
from ut.experiments.budget.cells import KINDS
from ut.experiments.budget.cells import MARKS
from ut.experiments.budget.cells import MISSING
from ut.experiments.budget.cells import read_runs
from ut.experiments.budget.cells import strings
from ut.experiments.budget.cells import SUCCESS
from ut.experiments.budget.cells import value_at
from ut.experiments.budget.cells import VARIANTS
from ut.experiments.budget.report import budget_figure
from ut.experiments.budget.report import markdown
from ut.experiments.budget.report import run
from ut.experiments.budget.verdicts import band
from ut.experiments.budget.verdicts import claim_groups
from ut.experiments.budget.verdicts import judge
from ut.experiments.budget.verdicts import paper_of
from ut.experiments.budget.verdicts import rule
from ut.experiments.budget.verdicts import status
from ut.experiments.budget.verdicts import table
from ut.experiments.budget.verdicts import TOLERANCE
from ut.experiments.budget.verdicts import verdict
