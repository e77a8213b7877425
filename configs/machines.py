r"""Seeds over machines: is the spread between random UTs (draws) larger than
the spread between programs (E, U initialisations) on one UT?

  python -m launch.sweep --config=configs/machines.py --workdir=results/machines
  python -m launch.sweep --config=configs/machines.py:smoke --workdir=/tmp/m  # CI size

Two cells (issue 17): Dyck attention-only (za) and k-hop with res_ln at k = 2,
each the random UT of its table (m = 256) with its table's config
(configs/dyck_table.py, configs/khop_table.py: the task's protocol and the
hyperparameters chosen on validation seeds, written there as literals). 3 UT draws (model.ut_seed 0, 1, 2) x 2
program seeds (seed 10, 11: E, U and the data; not the table seeds, so that
the draws here are not the table's runs). The sweep writes machines.md and
machines.json: per cell, the mean, the std of the per-draw means (between
machines) and the mean of the within-draw stds (between programs).
"""

from configs import common
from configs import dyck_table
from configs import khop_table

# Each cell is its table's config (the table's protocol and the hyperparameters
# its selection sweep chose on validation seeds).
CELLS = {
    "dyck": (dyck_table, "model=random,variant=attn,mix=za"),
    "khop2": (khop_table, "model=random,variant=res_ln,k=2"),
}
UT_SEEDS = (0, 1, 2)
PROGRAM_SEEDS = (10, 11)


def get_config(arg=None):
  cell, _, rest = (arg or "").partition(",")
  name = cell.partition("=")[2]
  if not cell.startswith("cell=") or name not in CELLS:
    raise common.UserError(
        f"machine runs start with cell=NAME; NAME one of {', '.join(CELLS)}"
    )
  module, base = CELLS[name]
  return module.get_config(",".join(filter(None, [base, rest])))


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(cells="khop2+dyck", smoke=False))
  for cell in args["cells"].split("+"):
    if cell not in CELLS:
      raise common.UserError(f"cells={cell!r}; use some of {'+'.join(CELLS)}")
    for ut_seed in UT_SEEDS:
      for seed in PROGRAM_SEEDS:
        add(
            f"cell={cell},seed={seed},ut_seed={ut_seed}"
            + (",smoke" if args["smoke"] else "")
        )



# machines.{json,md}: per cell the mean, the spread between machines and
# between programs (ut/experiments/figures.py: spread).
REPORT = "machines"
