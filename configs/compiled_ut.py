r"""A trained attention-only target compiled into the sparse and a random UT.

  python -m launch.compiled_ut --config=configs/compiled_ut.py:task=dyck --workdir=W
  python -m launch.compiled_ut --config=configs/compiled_ut.py:task=khop,k=1 --workdir=W
  python -m launch.compiled_ut --config=configs/compiled_ut.py:smoke --workdir=/tmp/c

Trains a `trained`/`attn` transformer (width d=32, H=2, L=2, head width 16: our
choice) on the task, compiles it with the simulation-core compilers into the
sparse UT (m = sparse width) and a Gaussian UT (m = 1.25 N, k_u = d: the DESIGN
§4 advice for float32), and evaluates both UTs with no gradient step on the
target's held-out set. Expected: agreement with the target >= 99.9% of scored
predictions (float32 rounding is the only difference). Beyond the paper.
Run time: 0.2-0.3 minutes on the 2-core CPU (the regeneration
at 23655b6, steps compiled_dyck and compiled_khop1; docs/history.md).
"""

import ml_collections

from configs import common
from configs import dyck as dyck_config
from configs import khop as khop_config


def get_config(arg=None):
  args = common.parse_arg(
      arg, dict(task="dyck", k=1, width=32, seed=0, smoke=False)
  )
  sub = f"model=trained,variant=attn,seed={args['seed']}"
  if args["task"] == "dyck":
    target = dyck_config.get_config(sub + (",smoke" if args["smoke"] else ""))
  elif args["task"] == "khop":
    target = khop_config.get_config(
        sub + f",k={args['k']}" + (",smoke" if args["smoke"] else "")
    )
  else:
    raise common.UserError(f"unknown task {args['task']!r}; use dyck or khop")
  target.model.width = args["width"]
  target.model.head_width = args["width"] // 2
  config = ml_collections.ConfigDict()
  config.target_config = target
  config.constructions = ("sparse", "random")
  config.m_factor = 1.25
  config.ut_seed = 0
  config.overwrite = False
  return config
