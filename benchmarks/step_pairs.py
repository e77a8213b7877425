"""Two training steps of one case timed side by side, in turns: what
benchmarks/paths_bench.py and benchmarks/residual_bench.py share (their flags,
the case check, the timing loop and the header line)."""

import statistics
import time

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from ut.io import roofline as roofline_lib


def define_flags(cases):
  """--repeats, --steps and --cases (default: `cases`); returns their holders."""
  return (
      flags.DEFINE_integer(
          "repeats", 7, "Timed rounds (medians reported).", lower_bound=1
      ),
      flags.DEFINE_integer("steps", 3, "Steps per timed round.", lower_bound=1),
      flags.DEFINE_list("cases", list(cases), "Cases to time."),
  )


def check_cases(names, known):
  """Exits with a one-line error when a requested case is not known."""
  unknown = sorted(set(names) - set(known))
  if unknown:
    raise SystemExit(f"unknown --cases {unknown}; use some of {list(known)}")


def same_steps(steps, state, batch, *, rtol, atol):
  """steps: key -> a jitted (state, batch) -> (state, metrics) that donates
  its state. Takes three steps of each from copies of `state` on `batch`,
  checks that each step's loss (the forward's value: the first steps'
  Adam updates are lr sign(g) and would hide a gradient of the wrong size)
  and every pair of parameters after them agree within rtol and atol, and
  returns key -> its state (to time on from)."""
  states = {k: jax.tree.map(jnp.array, state) for k in steps}
  for _ in range(3):
    losses = []
    for k, step in steps.items():
      states[k], metrics = step(states[k], batch)
      losses.append(float(metrics["loss"]))
    np.testing.assert_allclose(losses, losses[0], rtol=rtol, atol=atol)
  for a, b in zip(*(jax.tree.leaves(s.params) for s in states.values())):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
  return states


def median_ms(cases, repeats, steps):
  """cases: name -> (steps by key, states by key, batch); each step maps
  (state, batch) to (state, metrics). Runs `steps` steps of each key a
  round, in turns, for `repeats` rounds (the states move on in place), and
  returns name -> key -> median milliseconds a step."""
  times = {name: {k: [] for k in fns} for name, (fns, _, _) in cases.items()}
  for _ in range(repeats):
    for name, (fns, states, batch) in cases.items():
      for k, step in fns.items():
        start = time.perf_counter()
        for _ in range(steps):
          states[k], metrics = step(states[k], batch)
        jax.block_until_ready(metrics)
        times[name][k].append((time.perf_counter() - start) / steps)
  return {
      name: {k: 1e3 * statistics.median(t) for k, t in by_key.items()}
      for name, by_key in times.items()
  }


def header(tag, repeats, steps):
  """The first printed line: JAX, backend, the matmul speed measured now."""
  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  return (
      f"[{tag}] jax {jax.__version__} on {jax.default_backend()}; 2048^2 "
      f"matmul {gflops:.0f} GFLOP/s; medians of {repeats} interleaved "
      f"rounds of {steps} steps; losses and states equal over 3 steps"
  )
