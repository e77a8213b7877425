r"""Benchmarks of the simulation core; prints medians and ratios, run side by side.

  python -m benchmarks.sparse_bench                 # all three parts
  python -m benchmarks.sparse_bench --part=ratio    # structured vs dense
  python -m benchmarks.sparse_bench --part=scale    # H=2, L=10, d=64 sparse run
  python -m benchmarks.sparse_bench --part=compile  # random least-squares compile

ratio:   forward + gradient w.r.t. E of the sparse UT at H=2, L=4, d=16 (m=976),
         n=32, batch 32: structured (X routed along head strings; and
         `levels`, the m-wide state's levels routed) against dense (m x m R_V),
         timed one call a round (right after the other contender's call) and
         five calls a round (steady state, as a loop calls it). With more than
         one CPU device (--cpu_devices, by default one per core this process
         may use) also the structured one with its batch split over them:
         its small ops leave a second core idle, while the dense one's large
         matmuls use every core on one device.
scale:   H=2, L=10, d=64 (m=261,952; a dense R_V would need ~275 GB): build,
         compile and simulate-check on a few inputs, with peak memory (run in a
         fresh subprocess so that its peak RSS is its own), with NumPy's huge
         pages set as the launchers set them on CPU (configs/cpu.py).
compile: random-UT compile time (building A, least squares, cond) for N of a
         few thousand.
"""

import time

# Before the imports, so that the scale run's time includes them.
_START = time.perf_counter()

# pylint: disable=g-import-not-at-top,wrong-import-position
# ruff: noqa: E402
import functools
import os
import resource
import statistics
import subprocess
import sys

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from configs import cpu as cpu_config
from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import simulate
from ut.core import targets as targets_lib
from ut.core import transformer
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.cpu import host

_PART = flags.DEFINE_enum(
    "part",
    "all",
    ["all", "ratio", "scale", "compile"],
    "Which benchmark to run.",
)
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices",
    None,
    "JAX CPU devices for the ratio part (jax_num_cpu_devices); default: one "
    "per core this process may run on.",
    lower_bound=1,
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 7, "Timed repeats (median reported).", lower_bound=1
)


def median_seconds(fns, repeats, calls=1):
  """Median seconds per call of each fn, timed in interleaved rounds.

  Interleaving puts the same machine noise (other tenants, clock changes) on
  every contender, so that the ratio is stable even when the times are not.
  Each round times `calls` calls of a contender in a row (per call), as a
  training loop or a sweep calls the same program again and again.
  """
  for fn in fns.values():
    jax.block_until_ready(fn())  # Compile and warm up.
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      for _ in range(calls):
        jax.block_until_ready(fn())
      times[name].append((time.perf_counter() - start) / calls)
  return {name: statistics.median(t) for name, t in times.items()}


def bench_ratio(repeats):
  h, num_layers, d, n, batch = 2, 4, 16, 32, 32
  ut = sparse.make_sparse_ut(h, num_layers, d)
  target = targets_lib.init(
      jax.random.PRNGKey(0), num_heads=h, num_layers=num_layers, width=d
  )
  program, _ = compile_lib.compile_sparse(ut, target)
  embed = jnp.asarray(program["embed"], jnp.float32)
  x = jax.random.normal(jax.random.PRNGKey(1), (batch, n, d))
  dense = jax.tree.map(jnp.asarray, sparse.to_dense(ut))

  def structured_loss(e, xs, order="paths"):
    y = sparse.sparse_apply(ut, e, xs, causal=True, residual=False, order=order)
    return jnp.sum(y**2)

  def dense_loss(e, xs):
    y = transformer.forward(
        dict(dense, embed=e),
        xs,
        num_layers=num_layers,
        causal=True,
        residual=False,
    )
    return jnp.sum(y**2)

  # structured: the default order (routing X along head strings); levels: the
  # same function by routing the m-wide state's levels (the order before).
  losses = {
      "structured": structured_loss,
      "levels": functools.partial(structured_loss, order="levels"),
      "dense": dense_loss,
  }
  bound = {
      name: functools.partial(jax.jit(jax.value_and_grad(f)), embed, x)
      for name, f in losses.items()
  }
  devices = jax.local_devices()
  if len(devices) > 1 and batch % len(devices):
    print(
        f"  (no structured_split: {len(devices)} devices do not divide the "
        f"batch of {batch}; use --cpu_devices=2, 4, 8 ...)"
    )
  elif len(devices) == 1:
    print("  (no structured_split: one device; --cpu_devices=2 adds it)")
  if len(devices) > 1 and batch % len(devices) == 0:
    # The same program with the batch split over the devices (E replicated;
    # XLA adds the gradient's shares up across them).
    mesh = jax.sharding.Mesh(np.array(devices), ("batch",))
    split_x = jax.device_put(
        x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    )
    copied_e = jax.device_put(
        embed, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    )
    split = jax.jit(jax.value_and_grad(structured_loss))
    bound["structured_split"] = functools.partial(split, copied_e, split_x)
  outs = {name: fn() for name, fn in bound.items()}
  rel = {
      name: float(
          jnp.abs(out[1] - outs["dense"][1]).max()
          / jnp.abs(outs["dense"][1]).max()
      )
      for name, out in outs.items()
      if name != "dense"
  }
  print(
      f"[ratio] sparse UT H={h} L={num_layers} d={d} m={ut.m} n={n} batch={batch},"
      f" forward+grad wrt E, median of {repeats} interleaved rounds; max rel "
      f"diff of grads {rel['structured']:.2e}:"
  )
  print(
      "  levels: the same by routing the m-wide state's levels (max rel diff "
      f"of grads {rel['levels']:.2e})"
  )
  if "structured_split" in bound:
    print(
        f"  structured_split: the batch split over {len(devices)} CPU "
        f"devices (max rel diff of grads {rel['structured_split']:.2e})"
    )
  for block in (1, 5):
    secs = median_seconds(bound, repeats, calls=block)
    line = (
        f"  {block} call(s) a round: dense {secs['dense'] * 1e3:.2f} ms, "
        f"structured {secs['structured'] * 1e3:.2f} ms, speed-up (dense / "
        f"structured) {secs['dense'] / secs['structured']:.1f}x"
    )
    for name in ("levels", "structured_split"):
      if name in secs:
        line += (
            f"; {name} {secs[name] * 1e3:.2f} ms, "
            f"{secs['dense'] / secs[name]:.1f}x"
        )
    line += f"; levels / structured {secs['levels'] / secs['structured']:.2f}x"
    print(line)


def bench_scale():
  """The scale run, with NumPy's huge pages (`ut.cpu.host.numpy_hugepages`)
  set as configs/cpu.py has them, as the launchers set them on CPU."""
  host.numpy_hugepages(cpu_config.get_config().numpy_hugepages)
  h, num_layers, d, batch, n = 2, 10, 64, 2, 8
  t0 = time.perf_counter()
  ut = sparse.make_sparse_ut(h, num_layers, d)
  t1 = time.perf_counter()
  target = targets_lib.init(
      jax.random.PRNGKey(0), num_heads=h, num_layers=num_layers, width=d
  ).astype(np.float64)
  program, _ = compile_lib.compile_sparse(ut, target)
  t2 = time.perf_counter()
  x = np.random.default_rng(0).standard_normal((1, batch, n, d))
  result = simulate.check(
      ut, simulate.stack([program]), simulate.stack([target]), x
  )
  t3 = time.perf_counter()
  peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  dense_gb = ut.m**2 * 4 / 1e9  # One m x m float32 matrix.
  print(
      f"[scale] sparse UT H={h} L={num_layers} d={d}: m={ut.m} "
      f"(formula {bounds.sparse_width(h, num_layers, d)}); one dense m x m R_V needs "
      f"{dense_gb:.0f} GB in float32"
  )
  print(
      f"  build {t1 - t0:.2f}s  compile {t2 - t1:.2f}s  simulate-check "
      f"(f64 target + f32 and f64 UT, {batch}x{n} tokens, incl. XLA compile) "
      f"{t3 - t2:.2f}s  total {t3 - t0:.2f}s"
  )
  print(
      f"  process {time.perf_counter() - _START:.2f}s from its first import "
      "(Python and JAX imports included)"
  )
  print(
      f"  peak RSS {peak_gb:.2f} GB (whole process, incl. JAX runtime); "
      f"f32 rel err {result['float32']['max_rel_err']:.2e}, f64 abs err "
      f"{result['float64']['max_abs_err']:.2e}"
  )


def bench_compile():
  print("[compile] random UT, per-layer, m = N, float64 least squares:")
  for h, num_layers, d in ((2, 4, 16), (3, 3, 16), (2, 4, 32), (2, 5, 24)):
    n = bounds.random_threshold(h, num_layers, d)
    target = targets_lib.init(
        jax.random.PRNGKey(0), num_heads=h, num_layers=num_layers, width=d
    ).astype(np.float64)
    ut = gaussian.make_gaussian_ut(h, num_layers, n, d, seed=0)
    start = time.perf_counter()
    a, _ = compile_lib.linear_system(ut, target)
    t_sys = time.perf_counter() - start
    _, report = compile_lib.compile_random(ut, target)
    print(
        f"  H={h} L={num_layers} d={d} N={n}: build A {t_sys:.2f}s, "
        f"total compile {report.seconds:.2f}s, cond {report.cond:.3g}, "
        f"rel residual {report.rel_residual:.1e} (A is {a.shape[0]}x{a.shape[1]})"
    )


def main(argv):
  del argv
  part = _PART.value
  if part in ("all", "ratio"):
    cores = (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count() or 1
    )
    # Before JAX's backend starts (the first jax.devices() call).
    jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value or cores)
    bench_ratio(_REPEATS.value)
  if (
      part == "all"
  ):  # Own process, so that peak memory is the scale run's alone.
    subprocess.run(
        [sys.executable, "-m", "benchmarks.sparse_bench", "--part=scale"],
        check=True,
    )
  if part == "scale":
    bench_scale()
  if part in ("all", "compile"):
    bench_compile()


if __name__ == "__main__":
  app.run(main)
