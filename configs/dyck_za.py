r"""Zhong & Andreas's own model on Dyck-1 under their optimiser (issue 48 part 4).

  python -m launch.sweep --config=configs/dyck_za.py --workdir=results/dyck/za_model
  python -m launch.sweep --config=configs/dyck_za.py:smoke --workdir=/tmp/z   # CI size

Each run is configs/dyck.py with optimizer=za and mix=za_exact: their GPT-2
(ut/training/gpt2.py: width 16, 4 heads, 2 layers, MLP 64), their generator's
rules, their AdamW (lr 1e-3, b2 0.999, weight decay 1e-3 on weights, 500
warm-up steps, cosine to 0, batch 1000, 10,000 steps, no early stop), a
fixed 4,000-string test set and validation set that the training stream
never draws (their protocol rejects copies of test strings), the
validation set scored every 500 steps, the test set at each evaluation.

Rows, in the order they run:
  gpt2_random, 2,000 steps (their schedule shortened): the cross-check, seed 0;
  gpt2_random (their random model: only E and the head train), seeds 0-2;
  gpt2 (their trained model: every weight trains), seeds 0-2.
Their numbers (DESIGN §7): the trained width-16 GPT-2 stops at about 96.5% on
their test set, whose short balanced strings are never trained on.

Run time: about 3.6 steps a second on one core of this 2-core CPU (gpt2_random,
batch 1000): 9 minutes for the 2,000-step run, 46 for a 10,000-step one.
"""

from configs import common
from configs import dyck

get_config = dyck.get_config

SEEDS = (0, 1, 2)
BASE = "optimizer=za,mix=za_exact"


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(smoke=False))
  smoke = ",smoke" if args["smoke"] else ""
  seeds = SEEDS[:1] if args["smoke"] else SEEDS
  add(f"model=gpt2_random,{BASE},steps=2000,seed=0{smoke}")
  for model in ("gpt2_random", "gpt2"):
    for seed in seeds:
      add(f"model={model},{BASE},seed={seed}{smoke}")
