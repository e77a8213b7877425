"""XLA settings for tests where the numerics are not the point (STYLE 18)."""

import contextlib

import jax


@contextlib.contextmanager
def fast_compile():
  """Compiles with most XLA optimizations off, then restores the setting.

  For tests that compile many small programs and run them briefly (smoke
  training, per-length evaluation): compiling is most of their time, and
  this roughly halves it. The results can differ from an optimized
  compile's in the last bits, so on entry and on exit the compiled programs
  are dropped (`jax.clear_caches`): a test inside never reuses one compiled
  outside, nor a later test one compiled here. The
  flag is process-wide: enter it for a whole test class,
  `cls.enterClassContext(xla_settings.fast_compile())` in `setUpClass`.
  """
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  jax.clear_caches()
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", before)
    jax.clear_caches()
