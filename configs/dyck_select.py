r"""Choosing the Dyck table's learning rates on a validation seed (100) that no
table run uses, scored on the fixed validation set only.

  python -m launch.sweep --config=configs/dyck_select.py --workdir=results/dyck_select
  python -m launch.sweep --config=configs/dyck_select.py:smoke --workdir=/tmp/s  # CI size

Each run is configs/dyck.py (mix za) with the run's row of
configs/dyck_table.py and peak lr in LRS (the kind's default of
configs/common.py, a third of it, 3 times it), trained for `steps` (3000)
at a constant lr after warmup; the table takes, per row, the lr with the
best validation accuracy at the end. Our choice, for the budget: one seed, a
short horizon (the table then trains each row to a flat curve), and the
random UT of width 512 takes the choice of width 256 (not run here).
"""

from configs import common
from configs import dyck
from configs import dyck_table
from configs import tables

get_config = dyck.get_config

VALIDATION_SEED = 100
# The default first (configs/common.py), then a third of it and 3 times it.
LRS = {
    "sparse": (1e-2, 3e-3, 3e-2),
    "random": (1e-2, 3e-3, 3e-2),
    "trained": (1e-3, 3e-4, 3e-3),
}


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(steps=3000, smoke=False))
  for row in dyck_table.ROWS:
    if "m=512" in row:
      continue
    kind = tables.row_field(row, "model")
    for lr in LRS[kind][:2] if args["smoke"] else LRS[kind]:
      run = f"{row},mix=za,seed={VALIDATION_SEED}" + (
          ",smoke" if args["smoke"] else ""
      )
      overrides = {"train.lr": lr}
      if not args["smoke"]:
        overrides["train.steps"] = args["steps"]
      add(run, **overrides)


# selection.{md,json} in the workdir: per cell the hyperparameters the
# table uses (ut/experiments/selection.py's rule), to copy into its config.
REPORT = "selection"
