r"""The learnability gap (beyond the paper): a k-hop target compiled into the
sparse and a random UT, then E and U trained from a random start or from the
compiled program plus noise (ut/experiments/learnability/).

  python -m launch.learnability --config=configs/learnability.py --workdir=results/learnability
  python -m launch.learnability --config=configs/learnability.py:uts=sparse --workdir=results/learnability  # 30 core-minutes
  python -m launch.learnability --config=configs/learnability.py:smoke --workdir=/tmp/l  # CI size

Expected (uts=sparse; results/learnability/learnability.md): the compiled
program agrees with the target on every scored prediction; from the program
plus noise s <= 1 every seed reaches 99%, at s = 3 none; from scratch most
seeds do. Run time: the target about 1 minute, the 21 UT runs about half a
core-hour of training on this 2-core CPU (the report's core_minutes).

Arguments: k=INT (hops; the target has L = k + 1 layers as in configs/khop.py),
width=INT and head_width=INT (the target's d and per-head width), target_seed,
target_lr, uts=sparse+random|sparse|random, smoke.

Our choices (the issue leaves them open): docs/results.md, "The learnability
gap".
"""

import ml_collections

from configs import common
from configs import khop


def get_config(arg=None):
  args = common.parse_arg(
      arg,
      dict(
          k=2,
          width=64,
          head_width=32,
          target_seed=101,
          target_lr=1e-3,
          uts="sparse+random",
          smoke=False,
      ),
  )
  smoke = ",smoke" if args["smoke"] else ""
  target = khop.get_config(
      f"model=trained,variant=attn,k={args['k']},seed={args['target_seed']}"
      + smoke
  )
  target.model.width = args["width"]
  target.model.head_width = args["head_width"]
  target.train.lr = args["target_lr"]
  target.train.schedule = "cosine"
  target.train.stop_accuracy = 0.0
  if not args["smoke"]:
    target.train.steps = 10000
  config = ml_collections.ConfigDict()
  config.target = target
  config.constructions = tuple(args["uts"].split("+"))
  config.m_factor = 1.25
  config.ut_seed = 0
  config.noises = (0.0, 0.01, 0.1, 0.3, 1.0, 3.0)
  config.seeds = (0, 1, 2)
  # The UT runs' protocol: configs/khop.py's (its kind, shapes and seed are
  # set per run from the compiled UT), each UT's lr (config.lr) and a
  # plateau stop.
  config.ut = khop.get_config(
      f"model=sparse,variant=attn,k={args['k']}" + smoke
  )
  # Each UT's learning rate (config.ut.train.lr is replaced by it).
  config.lr = ml_collections.ConfigDict(dict(sparse=1e-2, random=1e-3))
  config.ut.train.plateau_evals = 6
  config.ut.train.plateau_delta = 0.002
  # False: no random-start runs (e.g. a probe of the noise rows only).
  config.scratch = True
  config.overwrite = False
  # True: train nothing; report the rows whose runs are finished (the rest
  # pending), e.g. from runs trained elsewhere.
  config.report_only = False
  if args["smoke"]:
    config.noises = (0.0, 1.0)
    config.seeds = (0, 1)
    # Given widths are kept; by default the smoke target is tiny.
    if "width" not in common.given(arg):
      target.model.width = 8
    if "head_width" not in common.given(arg):
      target.model.head_width = 4
  return config
