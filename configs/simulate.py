r"""Simulate-check: fixed UTs reproduce target transformers through E alone.

The bounds-and-errors table over a small (H, L, d) grid (prints it, and writes
simulate_table.csv / .json with provenance into the workdir):

  python -m launch.simulate --config=configs/simulate.py --workdir=workdir/simulate

Expected: sparse_m = (2L+1)d for H = 1 and d[(H^{L+1}-1)/(H-1) + H(H^L-1)/(H-1)]
for H >= 2; min_exact_m = N; float64 errors ~1e-14 (<= 1e-9); float32 relative
errors ~1e-6 (sparse) and up to ~1e-4 (random at m = N, where cond(A) ~ 1e2-1e4).
Run time: the table's `seconds` column gives each row's; the rows share
their compiled programs (ut.core.simulate.Padding), so the first row carries
the compiling (`python -m benchmarks.simulate_bench` times it cold).

Bring your own target (.npz format in ut/core/targets.py), X of shape (B, n, d):

  python -m launch.simulate --config=configs/simulate.py \
      --config.target=T.npz --config.inputs=X.npy --config.out=Y.npy \
      --config.ut=sparse|random [--config.m=INT] [--config.seed=INT] [--config.x64=True]

Y = UT(X, E) (B, n, d_out) is computed by the UT alone; Y.json beside it has the
errors against the target, m, N, the lower bound and the condition number.

Choices of ours (the paper has no experiment of this kind): targets are drawn by
`ut.core.targets.init` (Gaussian, variance 1/fan-in), inputs X ~ N(0, 1), n = 6 tokens,
causal attention, random UTs per-layer with k_u = d and m = N, seed 0.

Config arguments: `smoke` (a 2-row grid for tests).
"""

import ml_collections


def get_config(arg=None):
  config = ml_collections.ConfigDict()
  # Table over a grid of target classes (H, L, d).
  config.grid = (
      (1, 1, 4),
      (1, 2, 4),
      (1, 3, 4),
      (2, 1, 4),
      (2, 2, 4),
      (2, 3, 4),
      (3, 2, 4),
      (2, 2, 8),
  )
  config.num_targets = 4  # Targets checked per row (vmapped).
  config.batch = 4  # Inputs per target.
  config.seq_len = 6
  config.causal = True
  config.search_min_m = True  # Binary search for the smallest exact m.
  config.workdir = "workdir/simulate"
  # Bring your own target (all three paths set -> this mode).
  config.target = ""
  config.inputs = ""
  config.out = ""
  config.ut = "sparse"  # sparse | random
  config.m = ml_collections.config_dict.placeholder(int)  # Random: default N.
  config.k_u = ml_collections.config_dict.placeholder(int)  # Random: default d.
  config.shared = False  # Random: one set of weights for all layers.
  config.x64 = False  # Compute Y in float64 (default float32).
  config.seed = 0
  config.overwrite = False
  if arg == "smoke":
    config.grid = ((1, 2, 3), (2, 2, 2))
    config.num_targets = 2
    config.batch = 2
  elif arg:
    raise ValueError(f"unknown config argument {arg!r}; use 'smoke' or nothing")
  return config
