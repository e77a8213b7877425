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
its task's protocol with the hyperparameters chosen on validation seeds; run
the selection sweeps first). Runs go narrowest first. The sweep writes
width.md and width.png: final test accuracy and the share of seeds reaching
99% against m / N, with m = N marked.

The Dyck table's lr was chosen at m = 256 only. With `lrs=selected` a Dyck
run takes instead the lr that configs/width_select.py chose at its width on
a validation seed (run it first, into results/width_select); a run whose lr
is the table's keeps its name, the others' names add train.lr:

  python -m launch.sweep --config=configs/width.py:cells=dyck,lrs=selected --workdir=results/width_lr

`ratios=` (e.g. 1+2) plans some of the ratios only; runs of the others are
left as they are, and the report covers the finished runs it plans.
"""

import glob
import json
import math
import os

from configs import common
from configs import dyck_table
from configs import khop_table
from configs import tables
from ut.core import bounds

ROOT = tables.ROOT
SELECTION = "results/width_select/selection.json"

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


def dyck_lrs():
  """{m: lr} that configs/width_select.py chose for the Dyck cell."""
  chosen = tables.chosen(
      ROOT,
      SELECTION,
      "python -m launch.sweep --config=configs/width_select.py "
      "--workdir=results/width_select",
  )
  return {c["width"]: c["lr"] for c in chosen}


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
  lrs = dyck_lrs() if selected and "dyck" in cells else {}
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
          if m not in lrs:
            raise common.UserError(
                f"{SELECTION} has no lr for m={m}: rerun "
                "configs/width_select.py"
            )
          if lrs[m] != get_config(run).train.lr:
            overrides["train.lr"] = lrs[m]
        runs.append((m, run, overrides))
  for m, run, overrides in sorted(runs, key=lambda r: r[0]):
    add(run + (",smoke" if args["smoke"] else ""), **overrides)


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


def report(workdir, rows, cost=""):
  """width.{json,md,png}: accuracy and successes against m / N. The accuracy
  is on the test set where the runs have one (validation otherwise); a seed
  succeeds at >= 99% on validation, as in the tables. cost: a line under the
  table (`ut.experiments.sweep.cost_note`); last, the planned runs not yet
  finished, with their latest evaluation (`ut.experiments.sweep.unfinished_note`).
  """
  from ut.experiments import sweep  # pylint: disable=g-import-not-at-top
  from ut.io import plots  # pylint: disable=g-import-not-at-top
  from ut.io import reports  # pylint: disable=g-import-not-at-top

  points = []
  for r in rows:
    data = json.loads(r["data"])
    cell = "dyck" if "mix" in data else f"khop{data['k']}"
    n = threshold(cell)
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
      sweep.unfinished_note(workdir),
  )
  plots.against_width(points).savefig(os.path.join(workdir, "width.png"))
