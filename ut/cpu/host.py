"""Process and compiler settings for a CPU host: mechanisms only.

The values live in one overlay config, configs/cpu.py, which the launchers add
as `config.cpu` when JAX runs on its CPU backend (launch/cli.py); off CPU none
of this runs:

- `tune_malloc`: glibc keeps XLA's per-step buffers in one heap;
- `compiler_options`: XLA CPU with or without its YNNPACK fusions;
- `microbatches`: how many parts a training step splits its batch into, so
  that a part's activations stay in the caches.

This module knows nothing of models, and of configs only the section that
configs/cpu.py defines: callers pass sizes, kinds and that section.
"""

import ctypes
import importlib.metadata
import importlib.util
import os

import jax

# Activation elements per microbatch (tokens x (model width + MLP hidden
# width)), by model kind: see `microbatches`. Measured with one core per
# process, as `launch.sweep`'s workers run (ms per step, this budget against
# half as many parts): k-hop k = 4 res_ln_mlp (32 x 32 tokens, m = 4000) 160
# against 165 (16 parts against 8), k = 3 res_ln_mlp 60 against 76, Dyck
# res_ln_mlp 42 against 46, Dyck res_ln 7.6 against 9.2; the random UT with
# res_ln_mlp (m = 256, F = 256) 42 against 62 at k-hop k = 4 (2 parts against
# 1), and on Dyck 31 in 4 parts, 32 in 2, 50 in 1. The fixed-size benchmark
# step (random attn, 256 x 64 tokens) runs as fast on 2 cores in 16 parts as
# in 8 (benchmarks/train_bench.py --part=microbatches).
MICROBATCH_ELEMENTS = {"sparse": 2**17, "random": 2**18, "trained": 2**19}


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


def compiler_options(settings):
  """`jax.jit` keyword arguments for XLA CPU from `settings`, the section
  config.cpu of configs/cpu.py (None: XLA's defaults): ynn_fusions=False turns
  off XLA CPU's YNNPACK fusions (XLA's own kernels run every op). {} off CPU
  (results/bench/dp compares the two, data parallel)."""
  if settings is None or settings["ynn_fusions"] or not on_cpu():
    return {}
  return dict(compiler_options=dict(xla_cpu_experimental_ynn_fusion_type=""))


def microbatches(batch_size, num_tokens, *, kind, width):
  """How many equal parts a training step splits a (batch_size, num_tokens)
  batch into on CPU; 1 off CPU, where an accelerator wants the largest matmuls.

  About MICROBATCH_ELEMENTS[kind] activation elements each, `width` per token
  (the model width, plus the MLP's hidden width where there is an MLP): the
  largest divisor of the batch size at most batch_size * num_tokens * width /
  the budget. A part's activations then stay in the caches. The sparse kind's
  step is memory-bound (routing moves the m-wide state with little
  arithmetic) and gains from small parts.
  """
  if not on_cpu():
    return 1
  most = max(1, batch_size * num_tokens * width // MICROBATCH_ELEMENTS[kind])
  return max(
      n for n in range(1, min(most, batch_size) + 1) if batch_size % n == 0
  )
