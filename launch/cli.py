"""Shared entry-point plumbing: user errors become one line and a non-zero exit."""

import sys

from absl import app
from absl import logging

from ut.errors import UserError


def run(main):
  """Like absl.app.run, but a UserError prints `error: ...` and exits with 2."""

  def guarded(argv):
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
