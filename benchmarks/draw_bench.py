r"""Compile time of Gaussian draws: jax.random.normal against `targets.normal`.

  python -m benchmarks.draw_bench
  python -m benchmarks.record --out=results/bench/draw_bench.md -- \
      python -m benchmarks.draw_bench

`targets.normal(key, shape, dtype)` is `jax.random.normal(key, shape, dtype)`
bit for bit, drawn flat and reshaped: threefry counts elements in row-major
order, and XLA CPU compiles the flat counter much faster than a
multi-dimensional one. Each case runs cold (`jax.clear_caches()`, and no
persistent compilation cache) with either draw, interleaved round by round so
that both see the same load; printed are medians of --repeats rounds, their
ratio, and the 2048^2 matmul speed measured before them.

Cases:
  draw        one float32 draw of (10, 2, 64, 64): the scale run's target
              weights (H = 2, L = 10, d = 64);
  target      `targets.init` at that class, as the scale run calls it;
  trained     `models.init` of k-hop's trained res_ln_mlp model at k = 3
              (as `ut.training.train` builds it): its draws run op by op.
"""

import statistics
import time

from absl import app
from absl import flags
import jax
import numpy as np

from configs import khop as khop_config
from ut.core import targets
from ut.io import roofline as roofline_lib
from ut.training import data as data_lib
from ut.training import models
from ut.training import train

_REPEATS = flags.DEFINE_integer(
    "repeats", 5, "Timed rounds (medians reported).", lower_bound=1
)


def _multi_dim(key, shape, dtype):
  return jax.random.normal(key, shape, dtype)


def _cases():
  key = jax.random.PRNGKey(0)
  config = khop_config.get_config("model=trained,variant=res_ln_mlp,k=3")
  spec = train.model_spec(config, data_lib.make_task(config).info)
  return {
      "draw": lambda: targets.normal(key, (10, 2, 64, 64), np.float32),
      "target": lambda: targets.init(key, num_heads=2, num_layers=10, width=64),
      "trained": lambda: models.init(key, spec),
  }


def _run_cold(fn, draw):
  """(fn()'s result, its seconds) from empty caches, with targets.normal
  set to `draw`."""
  saved = targets.normal
  targets.normal = draw
  try:
    jax.clear_caches()
    targets._draw.clear_cache()  # pylint: disable=protected-access
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - start
  finally:
    targets.normal = saved


def main(argv):
  del argv
  jax.config.update("jax_enable_compilation_cache", False)
  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  flat = targets.normal
  cases = _cases()
  for name, fn in cases.items():  # Same arrays, bit for bit, either way.
    (a, _), (b, _) = _run_cold(fn, _multi_dim), _run_cold(fn, flat)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
  times = {name: {"multi_dim": [], "flat": []} for name in cases}
  for _ in range(_REPEATS.value):
    for name, fn in cases.items():
      times[name]["multi_dim"].append(_run_cold(fn, _multi_dim)[1])
      times[name]["flat"].append(_run_cold(fn, flat)[1])
  print(
      f"[draw] jax {jax.__version__} on {jax.default_backend()}; 2048^2 "
      f"matmul {gflops:.0f} GFLOP/s; medians of {_REPEATS.value} interleaved "
      "cold rounds (caches cleared); arrays equal bit for bit"
  )
  print(f"  {'case':<8} {'multi_dim s':>12} {'flat s':>8} {'ratio':>6}")
  for name, t in times.items():
    slow, fast = (statistics.median(t[k]) for k in ("multi_dim", "flat"))
    print(f"  {name:<8} {slow:12.2f} {fast:8.2f} {slow / fast:6.2f}")
  print(
      "  multi_dim = jax.random.normal(key, shape); flat = targets.normal "
      "(the same draw, flat and reshaped); ratio = multi_dim / flat"
  )


if __name__ == "__main__":
  app.run(main)
