"""Sweep worker processes on a CPU host: which CPUs each uses, what it trains first.

`launch.sweep --workers=N` trains a sweep in N processes side by side. On an
accelerator a sweep shards each vmapped group over the devices instead, and
none of this applies.

- XLA runs a CPU step's independent ops on all the CPUs it may use, so
  unpinned workers compete for every core; each worker is pinned to its own
  share of them (`worker_cpus`, `run_pinned`).
- Workers claim the largest work unit left first (`cost_proxy`), and half of
  them look at the memory-bound units first (`memory_bound`, `worker_order`),
  so that two of those seldom share the memory bus.

This module knows nothing of models or configs: callers pass sizes and kinds.
One process against pinned and unpinned workers was measured by a retired
benchmark (docs/performance.md, "Retired benchmarks").
"""

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import warnings

import numpy as np

_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.

# Model kinds whose train step streams a wide state with little arithmetic per
# byte: the sparse UT's routing moves its m-wide state (ut.training.models).
MEMORY_BOUND_KINDS = frozenset({"sparse"})


def worker_cpus(index, count, cpus=None):
  """The CPUs that worker `index` of `count` is pinned to: a contiguous share of
  `cpus` (default: this process's), or one of them, shared round-robin, when
  there are fewer CPUs than workers."""
  cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
  if count >= len(cpus):
    return {cpus[index % len(cpus)]}
  return {int(c) for c in np.array_split(cpus, count)[index]}


def cost_proxy(*, steps, batch_size, tokens, layers, width, mlp):
  """A rough size of a training run, to start the largest first: steps x batch
  x tokens x layers x model width (x 2 with an MLP). Only the order matters."""
  return steps * batch_size * tokens * layers * width * (2 if mlp else 1)


def memory_bound(kind):
  """True for a model kind whose step is memory-bound (MEMORY_BOUND_KINDS)."""
  return kind in MEMORY_BOUND_KINDS


def worker_order(units, index, count, *, cost, memory_bound):  # pylint: disable=redefined-outer-name
  """The order in which worker `index` of `count` tries to claim work units.

  Largest `cost(unit)` first. With several workers, even-numbered ones try the
  units where `memory_bound(unit)` first and odd-numbered ones the others, so
  that two memory-bound runs seldom share the memory bus:
  the retired `workers_bench --pairs` measured a step of the k-hop sparse UT
  (k = 3, res_ln_mlp) and one of the random UT (k = 4, res_ln_mlp), each pinned
  to one of 2 cores, at 0.85x-0.88x the time side by side that each takes
  beside its twin.
  """
  units = sorted(units, key=lambda unit: -cost(unit))
  if count < 2:
    return units
  first = index % 2 == 0
  return [u for u in units if memory_bound(u) == first] + [
      u for u in units if memory_bound(u) != first
  ]


def pin_to(cpus, parent):
  """In a forked worker before it execs: pin it to `cpus`, and have Linux send
  it SIGTERM when process `parent` dies, even by SIGKILL (which runs no
  `finally`), so that no orphaned worker trains on."""
  os.sched_setaffinity(0, cpus)
  with contextlib.suppress(OSError, AttributeError):
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  if os.getppid() != parent:  # The parent died before prctl took effect.
    os._exit(1)  # pylint: disable=protected-access


def run_pinned(commands):
  """Runs each (argv, cpus) of `commands` as a process pinned to its cpus
  (`pin_to`), waits for all, and returns their exit codes.

  If this process stops (an error, Ctrl-C, or SIGTERM, which it turns into
  SystemExit), the workers are stopped too; if it is killed outright, Linux
  stops them.
  """
  procs = []
  # SIGTERM (e.g. from a job scheduler) unwinds like Ctrl-C, through `finally`.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
  try:
    for argv, cpus in commands:
      with warnings.catch_warnings():
        # JAX warns that forking its threads may deadlock; the child runs only
        # `pin_to` and then execs a new Python, so it cannot.
        warnings.filterwarnings(
            "ignore", r"os\.fork\(\) was called", RuntimeWarning
        )
        procs.append(
            subprocess.Popen(
                argv, preexec_fn=functools.partial(pin_to, cpus, os.getpid())
            )
        )
    return [p.wait() for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.terminate()
    for p in procs:
      p.wait()
