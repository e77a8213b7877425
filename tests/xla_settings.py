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
  `cls.enterClassContext(xla_settings.fast_compile())` in `setUpClass`, or
  derive the class from `FastCompile`.
  """
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  jax.clear_caches()
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", before)
    jax.clear_caches()


class FastCompile:
  """A test class whose tests all run inside `fast_compile`.

  Put it first among the bases: `class T(xla_settings.FastCompile,
  parameterized.TestCase)`.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.enterClassContext(fast_compile())
