"""The machine's matmul speed, the yardstick for step rates and wall times.

A jitted `jnp.dot` of two N x N float32 matrices (N = 2048) on the default
device, all its cores: 2 N^3 FLOPs over the median time. The training
benchmarks divide step rates by it; `launch.reproduce` records it beside each
step's wall time, because the same 2-core CPU runs at very different speeds on
different days.
"""

import statistics
import time

import jax
import jax.numpy as jnp

N = 2048


def make():
  """(fn, flops): the compiled dot, warmed up, and its FLOP count."""
  key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
  a = jax.random.normal(key_a, (N, N), jnp.float32)
  b = jax.random.normal(key_b, (N, N), jnp.float32)
  dot = jax.jit(jnp.dot).lower(a, b).compile()
  jax.block_until_ready(dot(a, b))
  return lambda: dot(a, b), 2.0 * N**3


def seconds(fn):
  """Wall seconds of one call of fn, its result waited for."""
  start = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - start


def rate(roofline, repeats=7):
  """(FLOP/s, seconds): the median over `repeats` timed dots."""
  fn, flops = roofline
  secs = statistics.median(seconds(fn) for _ in range(repeats))
  return flops / secs, secs
