r"""The learning rate of the Dyck width runs, chosen at each width on a
validation seed (100) that no width run uses, scored on the fixed validation
set only.

  python -m launch.sweep --config=configs/width_select.py --workdir=results/width/select
  python -m launch.sweep --config=configs/width_select.py:smoke --workdir=/tmp/s  # CI size

Why: the Dyck width cell trains every width at the lr that configs/dyck_select.py
chose at m = 256. At m = 2N = 1024 that lr's validation curves swing (one seed
from 80% to 49% and back between evaluations) and the plateau rule stops them
by step 7000. Whether the lower accuracy there is the width's or the lr's is
what this sweep tells apart.

Each run is configs/width.py's Dyck run at one width (its ratios of N) with
peak lr in LRS (configs/dyck_select.py's: the default, a third of it, 3 times
it), for `steps` (3000, as configs/dyck_select.py) at a constant lr after
warmup. selection.md marks, per width, the lr with the best validation
accuracy at the end (ut/experiments/selection.py's rule), written into
configs/width.py's DYCK_LRS, at which `configs/width.py:cells=dyck,lrs=selected`
trains each width.
"""

from configs import common
from configs import dyck_select
from configs import width

get_config = width.get_config

VALIDATION_SEED = dyck_select.VALIDATION_SEED
LRS = dyck_select.LRS["random"]


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(steps=3000, smoke=False))
  n = width.threshold("dyck")
  for ratio in width.RATIOS:
    m = max(8, round(ratio * (64 if args["smoke"] else n)))
    for lr in LRS[:2] if args["smoke"] else LRS:
      overrides = {"model.m": m, "train.lr": lr}
      if not args["smoke"]:
        overrides["train.steps"] = args["steps"]
      add(
          f"cell=dyck,seed={VALIDATION_SEED}"
          + (",smoke" if args["smoke"] else ""),
          **overrides,
      )


# selection.{md,json} in the workdir: per cell the hyperparameters the
# table uses (ut/experiments/selection.py's rule), to copy into its config.
REPORT = "selection"
