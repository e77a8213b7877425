"""A tiny sweep for tests: 4 seeds x 2 learning rates of the Dyck smoke config."""

from configs import dyck

get_config = dyck.get_config


def sweep(add):
  for lr in (1e-2, 3e-3):
    for seed in range(4):
      add(f"model=random,smoke,seed={seed}", **{"train.lr": lr})
