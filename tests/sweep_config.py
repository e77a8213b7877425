"""Tiny sweeps for tests: 4 seeds x 2 learning rates of the Dyck smoke config;
with the argument `sparse`, 3 seeds of the sparse UT with res_ln_mlp; with
`kinds`, 2 seeds of each model kind (3 shape groups); with `diverges`, a run
whose loss becomes NaN, a healthy one, and a diverging target with its
compiled-UT run; with `diverges_in_group`, a diverging and a healthy run in one
shape group; with `long`, 2 runs of a million steps (for killing a sweep while
it trains); with `hosts`, two shape groups of 3 and 2 runs, a diverging one
among them (for a sweep over 4 devices in 2 processes); with `adaptive`, 2
seeds and, once both are recorded, a third whose learning rate is the first
seed's final accuracy (a run that depends on recorded results)."""

from configs import dyck

get_config = dyck.get_config


def sweep(add, arg=None, finished=None):
  if arg == "adaptive":
    names = [add(f"model=random,smoke,seed={seed}") for seed in range(2)]
    recorded = [finished(n) for n in names] if finished else [None]
    if all(recorded):
      lr = round(recorded[0]["eval_accuracy"] / 100, 6)
      add("model=random,smoke,seed=2", **{"train.lr": lr})
    return
  if arg == "diverges":  # The first run's loss becomes NaN at step 3.
    add("model=random,smoke,seed=0", **{"train.lr": 1e30})
    add("model=trained,smoke,seed=0")
    # A compiled-UT run whose target diverges.
    add("model=trained,smoke,seed=1", **{"train.lr": 1e30})
    add("model=trained,smoke,seed=1", compiled="sparse", **{"train.lr": 1e30})
    return
  if arg == "diverges_in_group":  # One vmapped group; the first run diverges.
    for lr in (1e30, 1e-2):
      add("model=random,smoke,seed=0", **{"train.lr": lr})
    return
  if arg == "hosts":  # Each group pads to 4 runs; seed 2's loss becomes NaN.
    for seed, lr in ((0, 1e-2), (1, 1e-2), (2, 1e30)):
      add(f"model=random,smoke,seed={seed}", **{"train.lr": lr})
    for seed in range(2):
      add(f"model=trained,smoke,seed={seed}")
    return
  if arg == "long":
    for seed in range(2):
      add(f"model=random,smoke,seed={seed}", **{"train.steps": 10**6})
    return
  if arg == "kinds":
    for kind in ("sparse", "random", "trained"):
      for seed in range(2):
        add(f"model={kind},smoke,seed={seed}")
    return
  if arg == "sparse":
    for seed in range(3):
      add(f"model=sparse,variant=res_ln_mlp,smoke,seed={seed}")
    return
  for lr in (1e-2, 3e-3):
    for seed in range(4):
      add(f"model=random,smoke,seed={seed}", **{"train.lr": lr})
