r"""The attention-only random UT's training step with its frozen layers split
(`models.split_frozen`, as `train.make_step` runs it) against stacked.

  python -m benchmarks.split_bench
  python -m benchmarks.record --out=results/bench/split_bench.md -- \
      taskset -c 0 python -m benchmarks.split_bench

XLA CPU copies a slice of a parameter before a dot reads it: inside a jitted
step each `wv[layer][head]` of the stacked (L, H, M, M) value maps is a fresh
M x M copy. `train.make_step` passes the step the maps split once, one array
per layer and head, which the dots read in place. Both steps here are
`train.train_step` jitted with the state donated; `stacked` is given the
state alone, `split` is `make_step`'s. Before timing, both take the same
steps from the same state and must end equal. Printed: medians of --repeats
interleaved rounds (each --steps steps on one batch), their ratio, and the
2048^2 matmul speed measured before them.

Cases (the coefficient form, `ut.cpu.forward.coefficient_form`, holds in each):
  learnability  the learnability's random UT: k-hop k = 2, L = 3, H = 2,
                k_u = 64, M = 2880 (1.25 N), batch 32 of 32 tokens;
  khop_k3       configs/khop.py:model=random,variant=attn,k=3 (M = 256);
  dyck          configs/dyck.py:model=random,variant=attn (M = 256).
"""

import functools

from absl import app
import jax

from benchmarks import step_pairs
from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.training import data as data_lib
from ut.training import models
from ut.training import train

_REPEATS, _STEPS, _CASES = step_pairs.define_flags(
    ["learnability", "khop_k3", "dyck"]
)


def _configs():
  learn = khop_config.get_config("model=random,variant=attn,k=2")
  learn.model.update(num_layers=3, m=2880, head_width=64)
  return {
      "learnability": learn,
      "khop_k3": khop_config.get_config("model=random,variant=attn,k=3"),
      "dyck": dyck_config.get_config("model=random,variant=attn"),
  }


def _case(config):
  task = data_lib.make_task(config)
  spec = train.model_spec(config, task.info)
  state, tx, _ = train.init_state(config, spec)
  batch = jax.device_put(train.train_batch(config, task, 0))
  if not models.splits_layers(spec, batch["tokens"].shape[1]):
    raise SystemExit(f"{spec}: not in the coefficient form; nothing to split")
  stacked = jax.jit(
      functools.partial(train.train_step, spec=spec, tx=tx), donate_argnums=0
  )
  steps = {"stacked": stacked, "split": train.make_step(config, spec, tx)[0]}
  states = step_pairs.same_steps(steps, state, batch, rtol=1e-5, atol=1e-6)
  return steps, states, batch


def main(argv):
  del argv
  configs = _configs()
  step_pairs.check_cases(_CASES.value, configs)
  head = step_pairs.header("split", _REPEATS.value, _STEPS.value)
  cases = {name: _case(configs[name]) for name in _CASES.value}
  ms = step_pairs.median_ms(cases, _REPEATS.value, _STEPS.value)
  print(head)
  print(f"  {'case':<13} {'stacked ms':>10} {'split ms':>9} {'ratio':>6}")
  for name, t in ms.items():
    slow, fast = t["stacked"], t["split"]
    print(f"  {name:<13} {slow:10.1f} {fast:9.1f} {slow / fast:6.2f}")
  print("  ratio = stacked ms / split ms")


if __name__ == "__main__":
  app.run(main)
