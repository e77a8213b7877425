r"""Choosing the Dyck table's learning rates on a validation seed (100) that no
table run uses, scored on the fixed validation set only.

  python -m launch.sweep --config=configs/dyck_select.py --workdir=results/dyck/select
  python -m launch.sweep --config=configs/dyck_select.py:part=exact --workdir=results/dyck/select_exact
  python -m launch.sweep --config=configs/dyck_select.py:smoke --workdir=/tmp/s  # CI size

part=exact: the rows to retrain under the exact generator (EXACT_ROWS), on
mixes za_exact and hard, each with its kind's lrs.

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
    "gpt2_random": (1e-3, 3e-3, 1e-2),  # Zhong & Andreas's first, then larger.
    "gpt2": (1e-3, 3e-4, 3e-3),
}


# part=exact (issue 48 part 4): the rows of the Dyck table to retrain under
# Zhong & Andreas's exact generator rules (mix za_exact) and on mix hard,
# each choosing its own lr: the table's rows, the random UT with res_ln and
# with res_ln_mlp (m = 256), and Zhong & Andreas's GPT-2, frozen but E and U
# (gpt2_random) and fully trained (gpt2), under our protocol.
EXACT_ROWS = (
    "model=sparse,variant=attn",
    "model=random,variant=attn",
    "model=random,variant=res_ln",
    "model=random,variant=res_ln_mlp",
    "model=trained,variant=attn",
    "model=trained,variant=res_ln_mlp",
    "model=gpt2_random",
    "model=gpt2",
)


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(part="za", steps=3000, smoke=False))
  if args["part"] not in ("za", "exact"):
    raise common.UserError(f"part={args['part']!r}; use za or exact")
  if args["part"] == "exact":
    _exact(add, args)
    return
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


def _exact(add, args):
  smoke = ",smoke" if args["smoke"] else ""
  for mix in ("za_exact", "hard"):
    for row in EXACT_ROWS:
      kind = tables.row_field(row, "model")
      for lr in LRS[kind][:2] if args["smoke"] else LRS[kind]:
        overrides = {"train.lr": lr}
        if not args["smoke"]:
          overrides["train.steps"] = args["steps"]
        add(f"{row},mix={mix},seed={VALIDATION_SEED}{smoke}", **overrides)


# selection.{md,json} in the workdir: per cell the hyperparameters the
# table uses (ut/experiments/selection.py's rule), to copy into its config.
REPORT = "selection"
