r"""The CPU microbatch rule against the best split, step by step, in one process.

  taskset -c 0 python -m benchmarks.microbatch_bench            # every case
  python -m benchmarks.microbatch_bench --case=za,dyck_trained_mlp --repeats=3
  python -m benchmarks.microbatch_bench --out=results/bench     # also saved

For each case (a default config of the Dyck and k-hop protocols, and Zhong &
Andreas's Dyck size as benchmarks/peer_bench.py builds it) the jitted training
step of `launch.train` runs with every candidate microbatch count (the divisors
of the batch from 1 to one string per part, by factors of about 2), the
candidates interleaved within each round. Printed per case: the count that
`ut.cpu.host.microbatches` picks (`rule`) and its median ms/step, the rule
before it (`old`: the largest divisor at most batch * tokens * width / 2^17
(sparse), 2^18 (random) or 2^19 (trained), attention not counted) and the
fastest candidate, with `old_over_rule` and `rule_over_best` (1 is the best
split). The 2048^2 matmul speed is measured in the same process.
"""

import json
import os
import statistics
import sys

from absl import app
from absl import flags
import jax
import numpy as np

from configs import cpu as cpu_config
from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.errors import UserError
from ut.io import reports
from ut.io import roofline as roofline_lib
from ut.training import data as data_lib
from ut.training import train

_CASE = flags.DEFINE_string("case", "all", "Comma-separated cases, or 'all'.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed rounds (medians).")
_OUT = flags.DEFINE_string("out", None, "Also save microbatch_bench.md/.json.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a saved report.")

CASES = {
    "za": None,  # Zhong & Andreas's size, as benchmarks/peer_bench.py's.
    "dyck_sparse": (dyck_config, "model=sparse"),
    "dyck_random": (dyck_config, "model=random"),
    "dyck_random_512": (dyck_config, "model=random,m=512"),
    "dyck_random_mlp": (dyck_config, "model=random,variant=res_ln_mlp"),
    "dyck_trained": (dyck_config, "model=trained"),
    "dyck_trained_mlp": (dyck_config, "model=trained,variant=res_ln_mlp"),
    "khop_sparse_2": (khop_config, "model=sparse,k=2"),
    "khop_sparse_3": (khop_config, "model=sparse,variant=res_ln,k=3"),
    "khop_random_2": (khop_config, "model=random,k=2"),
    "khop_random_928": (khop_config, "model=random,k=2,m=928"),
    "khop_trained_3": (khop_config, "model=trained,k=3"),
    "khop_trained_mlp_3": (khop_config, "model=trained,variant=res_ln_mlp,k=3"),
}
OLD_ELEMENTS = {"sparse": 2**17, "random": 2**18, "trained": 2**19}


def old_rule(batch_size, num_tokens, spec):
  """The microbatch count of the rule this one replaced."""
  width = spec.model_width + (
      spec.mlp_hidden_width if spec.variant == "res_ln_mlp" else 0
  )
  most = max(1, batch_size * num_tokens * width // OLD_ELEMENTS[spec.kind])
  return max(
      n for n in range(1, min(most, batch_size) + 1) if batch_size % n == 0
  )


def candidates(batch_size, extra):
  """Divisors of the batch from 1 to batch_size, about a factor 2 apart."""
  divisors = [n for n in range(1, batch_size + 1) if batch_size % n == 0]
  picked = {1, batch_size, *extra}
  target = 2
  for n in divisors:
    if n >= target:
      picked.add(n)
      target = 2 * n
  return sorted(picked)


def case_config(name):
  if CASES[name] is None:
    config = dyck_config.get_config("model=random,variant=res_ln_mlp")
    config.model.update(m=16, num_heads=4, head_width=4, mlp_ratio=4)
    config.train.batch_size = 1000
    return config
  module, arg = CASES[name]
  return module.get_config(arg)


def measure(name, repeats):
  """One case's row: ms/step of every candidate, interleaved."""
  config = cpu_config.overlay(case_config(name))
  task = data_lib.make_task(config)
  spec = train.model_spec(config, task.info)
  batch = jax.device_put(train.train_batch(config, task, 0))
  b, t = batch["tokens"].shape
  rule = train.default_microbatches(b, t, spec)
  old = old_rule(b, t, spec)
  steps = {}
  for n in candidates(b, (rule, old)):
    config.cpu.microbatches = str(n)
    state, tx, _ = train.init_state(config, spec)
    step, place_state, _ = train.make_step(config, spec, tx)
    holder = [place_state(state)]

    def run(step=step, holder=holder):
      holder[0], metrics = step(holder[0], batch)
      return metrics

    for _ in range(2):  # Compile and warm up.
      jax.block_until_ready(run())
    steps[n] = run
  times = {n: [] for n in steps}
  for _ in range(repeats):
    for n, run in steps.items():
      times[n].append(roofline_lib.seconds(run) * 1e3)
  ms = {n: statistics.median(v) for n, v in times.items()}
  best = min(ms, key=ms.get)
  return dict(
      case=name,
      kind=spec.kind,
      variant=spec.variant,
      m=spec.model_width,
      batch=b,
      tokens=t,
      rule=rule,
      rule_ms=ms[rule],
      old=old,
      old_ms=ms[old],
      best=best,
      best_ms=ms[best],
      old_over_rule=ms[old] / ms[rule],
      rule_over_best=ms[rule] / ms[best],
      all_ms=" ".join(f"{n}:{v:.1f}" for n, v in sorted(ms.items())),
  )


def main(argv):
  del argv
  names = list(CASES) if _CASE.value == "all" else _CASE.value.split(",")
  bad = [n for n in names if n not in CASES]
  if bad or _REPEATS.value < 1:
    sys.exit(
        f"error: --case={_CASE.value!r} (use any of {', '.join(CASES)} or "
        "all) and --repeats >= 1"
    )
  if _OUT.value:
    try:
      reports.check_output(
          os.path.join(_OUT.value, "microbatch_bench.json"),
          _OVERWRITE.value,
          "--overwrite",
      )
    except UserError as e:
      sys.exit(f"error: {e}")
  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  rows = []
  for name in names:
    rows.append(measure(name, _REPEATS.value))
    print(json.dumps(rows[-1]), flush=True)
  ratios = [r["old_over_rule"] for r in rows]
  head = (
      f"2048^2 matmul {gflops:.0f} GFLOP/s; medians of {_REPEATS.value} "
      f"interleaved rounds; old_over_rule: geometric mean "
      f"{float(np.exp(np.mean(np.log(ratios)))):.2f}, range "
      f"{min(ratios):.2f}-{max(ratios):.2f}"
  )
  table = reports.format_table(rows)
  print(head)
  print(table)
  if _OUT.value:
    os.makedirs(_OUT.value, exist_ok=True)
    reports.write_text(
        os.path.join(_OUT.value, "microbatch_bench.md"),
        head + "\n\n" + table + "\n",
    )
    reports.write_json(
        os.path.join(_OUT.value, "microbatch_bench.json"),
        dict(rows=rows, gflops=gflops, provenance=reports.provenance()),
    )


if __name__ == "__main__":
  app.run(main)
