"""Targets and counters for the simulation tests (ut/core, the simulate table).

Targets drawn with the numpy reference (tests/reference.py) or written to a
.npz as a user brings one; the tolerances the issue sets; a counter of XLA
compilations; and `python -m launch.simulate` as a command.
"""

import contextlib

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
