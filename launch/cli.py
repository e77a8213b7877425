"""Shared entry-point plumbing: user errors become one line and a non-zero exit."""

import logging as py_logging
import sys

from absl import app
from absl import logging

from ut.errors import UserError


class _QuietLibraries(py_logging.Filter):
  """Drops INFO chatter from orbax and jax's backend probing; keeps warnings."""

  def filter(self, record):
    noisy = ("/orbax/" in record.pathname or "xla_bridge" in record.pathname)
    return record.levelno >= py_logging.WARNING or not noisy


def run(main):
  """Like absl.app.run, but a UserError prints `error: ...` and exits with 2."""

  def guarded(argv):
    logging.get_absl_handler().addFilter(_QuietLibraries())
    try:
      return main(argv)
    except UserError as e:
      logging.flush()
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)

  try:
    app.run(guarded)
  except UserError as e:  # Raised while flags parse (e.g. a config file).
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
