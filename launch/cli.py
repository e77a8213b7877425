"""Shared entry-point plumbing: user errors become one line and a non-zero exit."""

import ctypes
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
  """absl's flag parsing, except that a bad flag prints one `error:` line (the
  innermost UserError of a config file's get_config if there is one) and exits
  with 2, instead of FATAL or a traceback; so does a stray argument (an absl
  program takes flags only)."""
  try:
    argv = flags.FLAGS(argv)
  except flags.Error as e:
    user, cause = None, e
    while cause is not None:
      if isinstance(cause, UserError):
        user = cause
      cause = cause.__cause__ or cause.__context__
    print(f"error: {user or e}", file=sys.stderr)
    sys.exit(2)
  except (AttributeError, KeyError) as e:  # --config.<field> that is not one.
    detail = e
    while isinstance(detail, BaseException) and detail.args:
      detail = detail.args[0]  # ml_collections nests the KeyError's text.
    detail = str(detail).replace("\n", "; ")
    print(f"error: no such config field: {detail}", file=sys.stderr)
    sys.exit(2)
  if len(argv) > 1:
    print(f"error: unexpected argument(s) {' '.join(argv[1:])}; flags start "
          "with --, and config arguments follow a colon: "
          "--config=configs/dyck.py:model=sparse,smoke", file=sys.stderr)
    sys.exit(2)
  return argv


def tune_malloc():
  """Keeps XLA's per-step CPU buffers in glibc's heap instead of fresh mmaps.

  With glibc's defaults a large temporary buffer allocated on a worker thread
  is mmap'd, page-faulted in and unmapped on every step; measured on 2 cores:
  the fixed-size benchmark step 333 -> 261 ms, k-hop sparse 87 -> 53 ms.
  Process-wide, so it lives here and not in the library; a no-op off glibc.
  """
  try:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-8, 1)        # M_ARENA_MAX: one arena.
    libc.mallopt(-4, 0)        # M_MMAP_MAX: no mmap for large blocks.
    libc.mallopt(-1, 2**30)    # M_TRIM_THRESHOLD: keep up to 1 GiB.
  except (OSError, AttributeError):
    pass


def run(main):
  """Like absl.app.run, but a UserError prints `error: ...` and exits with 2."""
  tune_malloc()

  def guarded(argv):
    logging.get_absl_handler().addFilter(_QuietLibraries())
    try:
      return main(argv)
    except UserError as e:
      logging.flush()
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)

  app.run(guarded, flags_parser=_parse_flags)
