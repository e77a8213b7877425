r"""The Dyck-1 table: model kinds x variants, mixes `za` and `hard`, 3 seeds each.

  python -m launch.sweep --config=configs/dyck_table.py --workdir=results/dyck
  python -m launch.sweep --config=configs/dyck_table.py:mixes=za,variants=attn --workdir=W
  python -m launch.sweep --config=configs/dyck_table.py:smoke --workdir=/tmp/t  # CI size

Each run is configs/dyck.py with the run's arguments; see its docstring for every
choice we made where the paper is silent. Every run of a mix is scored on the
same fixed validation set (eval_accuracy) and test set, neither ever trained
on (Zhong & Andreas's protocol; ut/training/data.py). Paper (attention-only,
za-style mix): sparse UT 100%, random UT 94.4%, trained about the same.
Expected result and run time under this protocol: not measured yet (the
previous protocol's table took 15.8 minutes with --workers=2,
results/reproduce_partial.md).
"""

from configs import dyck
from configs import tables

get_config = dyck.get_config

# The paper's numbers (DESIGN §7, from the seed summary), in percent, by
# (mix, kind, variant) or (kind, variant): written beside ours in paper.md.
PANEL = "mix"
PAPER = {
    ("za", "sparse", "attn"): "100",
    ("za", "random", "attn"): "94.4",
    ("za", "trained", "attn"): "about the same",
}


def sweep(add, arg=None):
  args = tables.parse_grid(arg, mixes="za+hard")
  tables.add_grid(add, args, "mix", args["mixes"])
