r"""The width threshold of random UTs: error against m / N (DESIGN §4, §5).

  python -m launch.threshold --config=configs/threshold.py --workdir=results/threshold

writes threshold.csv, threshold.json (rows, per-class summary, wall time,
provenance) and threshold.png into the workdir (refuses to overwrite them
unless --config.overwrite=True). About a minute on 2 CPU cores.

Expected: for every (H, L, d) the float64 max relative error is O(0.1..1) at
m = N - 1 and below, and about 1e-13 (rounding) from m = N on: the threshold is
sharp at N = 2d(H + ... + H^L) + d H^L. The paper proves universality almost
surely at m >= N and the lower bound m >= H^L / 2 (Theorem 4.1); the threshold
curve itself goes beyond the paper.

Choices of ours: targets from `ut.core.targets.init` (Gaussian, variance 1/fan-in),
causal, inputs X ~ N(0, 1) with n = 6 tokens, per-layer Gaussian UTs with
k_u = d, one UT (seed 0) per width shared by the targets of a point.

Config arguments: `smoke` (two small classes, three ratios; a few seconds).
"""

import ml_collections


def get_config(arg=None):
  config = ml_collections.ConfigDict()
  # (H, L, d), N = 40, 128, 144, 132: d = 4 for the deeper classes keeps the
  # float64 least-squares solves (N x m) small.
  config.grid = ((1, 2, 8), (2, 2, 8), (2, 3, 4), (3, 2, 4))
  # m = ceil(r N) for each r, plus N - 1, N and ceil(H^L / 2) (when >= 1).
  config.ratios = (0.25, 0.5, 0.75, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5)
  config.num_targets = 4  # Targets per point (vmapped), one UT.
  config.batch = 4  # Inputs per target.
  config.seq_len = 6
  config.causal = True
  config.seed = 0
  config.workdir = "workdir/threshold"
  config.overwrite = False
  if arg == "smoke":
    config.grid = ((1, 2, 4), (2, 2, 2))
    config.ratios = (1.25,)
    config.num_targets = 3
    config.batch = 2
  elif arg:
    raise ValueError(f"unknown config argument {arg!r}; use 'smoke' or nothing")
  return config
