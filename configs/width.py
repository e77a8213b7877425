r"""Beyond the paper: does gradient descent need the width at which a program
provably exists? The random UT trained at m = ratio x N, N the number of
linear conditions its compiler solves (m >= N: every target of the class has
an exact program, ut.core.bounds.random_threshold).

  python -m launch.sweep --config=configs/width.py --workdir=results/width
  python -m launch.sweep --config=configs/width.py:cells=dyck --workdir=W
  python -m launch.sweep --config=configs/width.py:smoke --workdir=/tmp/w  # CI size

Cells (our choice, from issue 17): Dyck attention-only (za; H = 2, L = 2,
d = k_u = 32: N = 512), k-hop with res_ln at k = 1 and k = 2 (L = k + 1;
N of the residual class, 800 and 2528: the compiler's class closest to
res_ln, which adds a LayerNorm it does not handle). ratios: m / N in
{1/8, 1/4, 1/2, 1, 2}; 3 seeds, each a new UT draw (model.ut_seed = seed).
Each run is its table's config (configs/dyck_table.py, configs/khop_table.py:
its task's protocol with the hyperparameters chosen on validation seeds,
written there as literals). Runs go narrowest first. The sweep writes
width.md and width.png: final test accuracy and the share of seeds reaching
99% against m / N, with m = N marked.

The Dyck table's lr was chosen at m = 256 only. With `lrs=selected` a Dyck
run takes instead the lr that configs/width_select.py chose at its width on
a validation seed (DYCK_LRS, from results/width/select/selection.md); a run
whose lr is the table's keeps its name, the others' names add train.lr:

  python -m launch.sweep --config=configs/width.py:cells=dyck,lrs=selected --workdir=results/width/lr

`ratios=` (e.g. 1+2) plans some of the ratios only; runs of the others are
left as they are, and the report covers the finished runs it plans.
"""

import math

from configs import common
from configs import dyck_table
from configs import khop_table
from configs import tables
from ut.core import bounds

# The lr configs/width_select.py chose for the Dyck cell, by width m (for
# lrs=selected).
DYCK_LRS = {  # results/width/select/selection.md
    64: 0.01,
    128: 0.01,
    256: 0.01,
    512: 0.003,
    1024: 0.01,
}

# Each cell is its table's config (the table's protocol and the hyperparameters
# its selection sweep chose on validation seeds).
CELLS = {
    "dyck": ("configs/dyck_table.py", "model=random,variant=attn,mix=za", 2),
    "khop1": ("configs/khop_table.py", "model=random,variant=res_ln,k=1", 2),
    "khop2": ("configs/khop_table.py", "model=random,variant=res_ln,k=2", 3),
}
RATIOS = (0.125, 0.25, 0.5, 1.0, 2.0)
_MODULES = {
    "configs/dyck_table.py": dyck_table,
    "configs/khop_table.py": khop_table,
}


def threshold(cell):
  """N of the cell's UT class (H = 2, k_u = d = 32, L layers)."""
  _, arg, num_layers = CELLS[cell]
  return bounds.random_threshold(
      2, num_layers, 32, 32, 32, residual="res_ln" in arg
  )


def get_config(arg=None):
  """configs/<task>_table.py's config for `cell=<name>,<its arguments>`."""
  cell, _, rest = (arg or "").partition(",")
  name = cell.partition("=")[2]
  if not cell.startswith("cell=") or name not in CELLS:
    raise common.UserError(
        f"width runs start with cell=NAME; NAME one of {', '.join(CELLS)}"
    )
  path, base, _ = CELLS[name]
  return _MODULES[path].get_config(",".join(filter(None, [base, rest])))


def sweep(add, arg=None):
  args = common.parse_arg(
      arg,
      dict(
          cells="dyck+khop1+khop2",
          seeds=3,
          smoke=False,
          lrs="table",
          ratios="+".join(f"{r:g}" for r in RATIOS),
      ),
  )
  try:
    ratios = [float(r) for r in str(args["ratios"]).split("+")]
  except ValueError:
    ratios = [math.nan]
  if not set(ratios) <= set(RATIOS):
    raise common.UserError(
        f"ratios={args['ratios']!r}; use some of "
        f"{'+'.join(f'{r:g}' for r in RATIOS)}"
    )
  if args["lrs"] not in ("table", "selected"):
    raise common.UserError(f"lrs={args['lrs']!r}; use table or selected")
  cells = args["cells"].split("+")
  for cell in cells:
    if cell not in CELLS:
      raise common.UserError(f"cells={cell!r}; use some of {'+'.join(CELLS)}")
  selected = args["lrs"] == "selected" and not args["smoke"]
  runs = []
  for cell in cells:
    n = threshold(cell)
    for ratio in ratios:
      m = max(8, round(ratio * n))
      if args["smoke"]:
        m = max(8, round(ratio * 64))
      for seed in range(args["seeds"]):
        run = f"cell={cell},seed={seed}"
        overrides = {"model.m": m}
        if cell == "dyck" and selected:
          if m not in DYCK_LRS:
            raise common.UserError(
                f"configs/width.py's DYCK_LRS has no lr for m={m}: choose it "
                "with `python -m launch.sweep --config=configs/width_select.py"
                " --workdir=results/width/select` and write it there from "
                "results/width/select/selection.md"
            )
          if DYCK_LRS[m] != get_config(run).train.lr:
            overrides["train.lr"] = DYCK_LRS[m]
        runs.append((m, run, overrides))
  for m, run, overrides in sorted(runs, key=lambda r: r[0]):
    add(run + (",smoke" if args["smoke"] else ""), **overrides)



# width.{json,md,png}: accuracy and successes against m / N, m = N marked
# (ut/experiments/figures.py; N from `threshold`).
REPORT = "width"
