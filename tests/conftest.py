"""Strict numerics for every test (STYLE 12); absl flags parsed for absltest helpers.

The suite runs in two pytest-xdist workers (`-n 2`, as the README's command and
.ci/run say). On a GPU, JAX would give 75% of its memory to whichever worker
starts first, so each process takes only what it uses.

JAX's persistent compilation cache is on, as in every launcher
(`launch.cli.use_compilation_cache`: $UT_JAX_CACHE, default ~/.cache/ut/jax;
empty turns it off), so a shape the in-process tests compile once is read back
by the other worker, by later tests that build a fresh jitted function of the
same computation, and by the next run of the suite.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# pylint: disable=g-import-not-at-top
from absl import flags
import jax

from launch import cli

jax.config.update("jax_numpy_rank_promotion", "raise")
cli.use_compilation_cache()


def pytest_configure(config):
  del config
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
