"""Process and compiler settings for a CPU host: mechanisms only.

The values live in one overlay config, configs/cpu.py, which the launchers add
as `config.cpu` when JAX runs on its CPU backend (launch/cli.py); off CPU none
of this runs:

- `tune_malloc`: glibc keeps XLA's per-step buffers in one heap;
- `numpy_hugepages`: whether NumPy asks for transparent huge pages;
- `compiler_options`: XLA CPU with or without its YNNPACK fusions;
- `microbatches`: how many parts a training step splits its batch into, so
  that a part's activations stay in the caches;
- `start_backend`: JAX's backend started with XLA CPU's thread pool of a
  given size instead of one thread per core (a second thread slowed steps of
  tiny ops).

This module knows nothing of models, and of configs only the section that
configs/cpu.py defines: callers pass sizes, kinds and that section.
"""

import ctypes
import importlib.metadata
import importlib.util
import os

import jax
import numpy as np

# Activation elements per microbatch, by model kind: see `microbatches`. The
# random UT's budget is RANDOM_BUDGET_PER_M2 x m^2: each part recomputes its
# first layer's tables (sum_h E R_V,h, about (V + T) m^2 H multiply-adds,
# ut.cpu.forward), so a wide random UT wants few large parts and a narrow one
# many small ones. Fitted to measured steps (docs/performance.md, "Host
# settings"; results/bench/microbatch_bench.md).
MICROBATCH_ELEMENTS = {
    "sparse": 2**17,
    "trained": 2**17,
    "gpt2": 2**17,
    "gpt2_random": 2**17,
}
RANDOM_BUDGET_PER_M2 = 5


def on_cpu():
  """Whether JAX's default backend is its CPU (this starts the backend)."""
  return jax.default_backend() == "cpu"


def cpu_expected(platforms=None):
  """Whether JAX will run on its CPU backend, told without starting a backend.

  `tune_malloc` must come before JAX starts its threads, so before
  `jax.default_backend()` can say. JAX picks the CPU when `platforms`
  (default: jax_platforms, or JAX_PLATFORMS) names it first, or, with none
  named, when no accelerator is installed: no PJRT plugin (a `jax_plugins`
  module or entry point, or PJRT_NAMES_AND_LIBRARY_PATHS) and no libtpu. A
  host with an accelerator's plugin but no accelerator counts as not CPU.
  """
  if platforms is None:
    platforms = jax.config.jax_platforms
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  plugins = importlib.util.find_spec("jax_plugins") is not None or any(
      True for _ in importlib.metadata.entry_points(group="jax_plugins")
  )
  return not (
      plugins
      or importlib.util.find_spec("libtpu") is not None
      or os.environ.get("TPU_LIBRARY_PATH")
      or os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS")
  )


def start_backend(threads):
  """Starts JAX's backend with XLA CPU's thread pool sized for `threads`
  threads, then lets every thread run on any of the process's cores again.

  XLA sizes its CPU thread pool once, from the cores the process may run on
  (its affinity mask) when the backend starts (jax-ml/jax#1539). With one
  thread per core, each op of a small step is split and waited for across
  cores: at Zhong & Andreas's Dyck size a step on both cores of this 2-core
  machine took longer than on one pinned core (`python -m benchmarks.peer_bench
  --startup=compare`). So the mask holds `threads` cores while the backend starts,
  and the whole mask afterwards: the OS still places the few threads on
  whichever cores are free. A no-op where the backend has started already or
  the platform has no affinity masks; threads=None or at least the number of
  cores leaves XLA's default and the backend to start when first used.
  Returns the pool size asked for, or None.
  """
  if threads is None or not hasattr(os, "sched_getaffinity"):
    return None
  mask = os.sched_getaffinity(0)
  if threads >= len(mask):
    return None
  os.sched_setaffinity(0, sorted(mask)[:threads])
  try:
    jax.devices()
  finally:
    for tid in os.listdir("/proc/self/task"):
      try:
        os.sched_setaffinity(int(tid), mask)
      except OSError:  # A thread that has ended meanwhile.
        pass
  return threads


def tune_malloc():
  """Keeps XLA's per-step CPU buffers in glibc's heap instead of fresh mmaps.

  With glibc's defaults a large temporary buffer allocated on a worker thread
  is mmap'd, page-faulted in and unmapped on every step
  (benchmarks/train_bench.py --mallopt measures it). Process-wide, and only
  effective before JAX starts its threads (each takes its own arena then);
  a no-op off glibc. Returns whether glibc took the settings.
  """
  try:
    libc = ctypes.CDLL("libc.so.6")
    return bool(
        libc.mallopt(-8, 1)  # M_ARENA_MAX: one arena.
        and libc.mallopt(-4, 0)  # M_MMAP_MAX: no mmap for large blocks.
        and libc.mallopt(-1, 2**30)
    )  # M_TRIM_THRESHOLD: keep 1 GiB.
  except (OSError, AttributeError):
    return False


def numpy_hugepages(enabled):
  """Sets whether NumPy asks the kernel for transparent huge pages
  (madvise(MADV_HUGEPAGE)) for the arrays it allocates from now on; returns
  the previous setting, or None where this NumPy has no such switch.

  NumPy asks by default on Linux 4.6 and later (NUMPY_MADVISE_HUGEPAGE,
  read at import, sets the start value). On a VM whose host backs guest
  memory at its first touch, a fresh large array in huge pages can fault in
  far slower than in 4 KiB pages (results/bench/hugepage_bench.md).
  """
  multiarray = getattr(getattr(np, "_core", None), "multiarray", None)
  toggle = getattr(multiarray, "_set_madvise_hugepage", None)
  if toggle is None:
    return None
  return bool(toggle(bool(enabled)))


def compiler_options(settings):
  """`jax.jit` keyword arguments for XLA CPU from `settings`, the section
  config.cpu of configs/cpu.py (None: XLA's defaults): ynn_fusions=False turns
  off XLA CPU's YNNPACK fusions (XLA's own kernels run every op). {} off CPU
  (results/bench/dp compares the two, data parallel)."""
  if settings is None or settings["ynn_fusions"] or not on_cpu():
    return {}
  return dict(compiler_options=dict(xla_cpu_experimental_ynn_fusion_type=""))


def microbatches(
    batch_size, num_tokens, *, kind, width, num_heads, m=0, cpu=None
):
  """How many equal parts a training step splits a (batch_size, num_tokens)
  batch into on CPU; 1 off CPU, where an accelerator wants the largest matmuls.

  A string's activations are counted as num_tokens * width (the model width,
  plus the MLP's hidden width where there is an MLP) plus its attention
  scores, num_heads * num_tokens^2. A part holds about the kind's budget of
  them (MICROBATCH_ELEMENTS; for the random UT RANDOM_BUDGET_PER_M2 * m^2,
  m its width), so that it stays in the caches: the answer is the largest
  divisor of the batch size at most batch_size * elements / budget (at least
  one part, and at least one string a part). cpu: whether JAX runs on its
  CPU (None: ask JAX, which starts its backend).
  """
  if not (on_cpu() if cpu is None else cpu):
    return 1
  if kind == "random" and m < 1:
    raise ValueError(f"a random UT's microbatches need its width m; got m={m}")
  if kind == "random":
    budget = RANDOM_BUDGET_PER_M2 * m * m
  else:
    budget = MICROBATCH_ELEMENTS[kind]
  elements = num_tokens * width + num_heads * num_tokens * num_tokens
  most = max(1, min(batch_size, batch_size * elements // budget))
  return max(n for n in range(1, most + 1) if batch_size % n == 0)
