"""Targets and counters for the simulation tests (ut/core, the simulate table).

Targets drawn with the numpy reference (tests/reference.py) or written to a
.npz as a user brings one; the tolerances the issue sets; a counter of XLA
compilations; and `python -m launch.simulate` as a command.
"""

import contextlib
import os
import subprocess
import sys

import jax
import numpy as np

from tests import reference
from ut.core import targets as targets_lib

F64_ATOL = 1e-9  # Issue: float64 max abs error <= 1e-9.
F32_RTOL = 1e-4  # Issue: float32 <= 1e-4 relative (sparse; random at 1.25 N).


_COUNTERS = []  # The compile counters active now.


def _on_duration(event, seconds, **kwargs):
  del seconds, kwargs
  if event == "/jax/core/compile/backend_compile_duration":
    for counter in _COUNTERS:
      counter[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


@contextlib.contextmanager
def count_compiles():
  """Counts XLA compilations while active: `with count_compiles() as n`, then
  n[0]. Deterministic: a program found in JAX's caches is not compiled."""
  counter = [0]
  _COUNTERS.append(counter)
  try:
    yield counter
  finally:
    _COUNTERS.remove(counter)


def make_target(
    seed,
    *,
    num_heads,
    num_layers,
    width,
    causal,
    looped,
    residual,
    out_width=None,
):
  w = reference.random_target(
      np.random.default_rng(seed),
      num_heads=num_heads,
      num_layers=num_layers,
      width=width,
      looped=looped,
      out_width=out_width,
  )
  w.setdefault("wu", np.eye(width))
  return w, targets_lib.Target(**w, causal=causal, residual=residual)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_simulate(*overrides):
  cmd = [
      sys.executable,
      "-m",
      "launch.simulate",
      "--config=configs/simulate.py",
      *overrides,
  ]
  return subprocess.run(
      cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )


def write_target(
    path,
    rng,
    *,
    num_layers=2,
    num_heads=2,
    d=4,
    k=3,
    kv=5,
    d_out=3,
    residual=0,
    looped=False,
):
  lp = 1 if looped else num_layers
  w = dict(
      wq=rng.standard_normal((lp, num_heads, d, k)) / 2,
      wk=rng.standard_normal((lp, num_heads, d, k)) / 2,
      wv=rng.standard_normal((lp, num_heads, d, kv)) / 2,
      wo=rng.standard_normal((lp, num_heads, kv, d)) / 3,
      wu=rng.standard_normal((d, d_out)),
  )
  for key in ("wq", "wk", "wv", "wo"):
    w[key] = np.repeat(w[key], num_layers // lp, axis=0)
  np.savez(path, **w, causal=np.array(1), residual=np.array(residual))
  return w
