"""Strict numerics for every test (STYLE 12); absl flags parsed for absltest helpers.

The suite runs in two pytest-xdist workers (`-n 2`, as the README's command and
.ci/run say). On a GPU, JAX would give 75% of its memory to whichever worker
starts first, so each process takes only what it uses.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# pylint: disable=g-import-not-at-top
from absl import flags
import jax

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_configure(config):
  del config
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
