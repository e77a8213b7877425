"""Strict numerics for every test (STYLE 12); absl flags parsed for absltest helpers."""

from absl import flags
import jax

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_configure(config):
  del config
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
