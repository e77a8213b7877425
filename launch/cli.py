"""Shared entry-point plumbing: user errors become one line and a non-zero exit."""

import logging as py_logging
import sys

from absl import app
from absl import flags
from absl import logging

from ut.errors import UserError


class _QuietLibraries(py_logging.Filter):
  """Drops INFO chatter from orbax and jax's backend probing; keeps warnings."""

  def filter(self, record):
    noisy = ("/orbax/" in record.pathname or "xla_bridge" in record.pathname)
    return record.levelno >= py_logging.WARNING or not noisy


def _parse_flags(argv):
  """absl's flag parsing, except that a UserError raised inside a flag (a config
  file's get_config) prints one line instead of FATAL and a traceback."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    user, cause = None, e
    while cause is not None:
      if isinstance(cause, UserError):
        user = cause
      cause = cause.__cause__ or cause.__context__
    if user is None:
      return app.parse_flags_with_usage(argv)
    print(f"error: {user}", file=sys.stderr)
    sys.exit(2)


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

  app.run(guarded, flags_parser=_parse_flags)
