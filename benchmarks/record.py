r"""Runs a benchmark command and saves what it prints, with its provenance.

  python -m benchmarks.record --out=results/bench/sparse_bench.md -- \
      python -m benchmarks.sparse_bench

For benchmarks that only print. The saved file starts with the command, the
git commit, the date and the 2048^2 matmul speed measured just before the
command runs (in this process, on the CPUs it is pinned to), then the command's
standard output verbatim; the command's standard error is
passed through. An existing file is kept unless --overwrite is given; a failed
command writes nothing and exits with its status.
"""

import datetime
import os
import shlex
import subprocess
import sys

from absl import app
from absl import flags

from ut.errors import UserError
from ut.io import reports
from ut.io import roofline as roofline_lib

_OUT = flags.DEFINE_string("out", None, "The report file (.md).")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a saved report.")


def main(argv):
  command = argv[1:]
  if not command or not _OUT.value:
    sys.exit(
        "error: give --out=FILE.md and the command after --, e.g. "
        "python -m benchmarks.record --out=r.md -- python -m "
        "benchmarks.sparse_bench"
    )
  try:
    reports.check_output(_OUT.value, _OVERWRITE.value, "--overwrite")
  except UserError as e:
    sys.exit(f"error: {e}")
  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  proc = subprocess.run(command, stdout=subprocess.PIPE, text=True)
  sys.stdout.write(proc.stdout)
  if proc.returncode:
    sys.exit(proc.returncode)
  head = (
      f"$ {shlex.join(command)}   # commit {reports.git_commit()}, "
      f"{datetime.date.today().isoformat()}, 2048^2 matmul {gflops:.0f} "
      f"GFLOP/s before it"
  )
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  reports.write_text(_OUT.value, f"{head}\n\n{proc.stdout}")


if __name__ == "__main__":
  app.run(main)
