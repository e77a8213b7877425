"""Sweep entry point: python -m launch.sweep --config=configs/<table>.py --workdir=W.

Runs the config file's sweep(add) grid, batching runs that share shapes over
all devices, skipping runs already finished in W, and writes W/table.{csv,json,md}
and, when the config file has the paper's numbers (PAPER, PANEL), W/paper.md.
Compiled steps are cached in W/jax_cache (JAX's persistent compilation cache):
runs that differ only in their seed, and a restarted sweep, load the step
instead of compiling it again.
"""

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

from absl import flags
import jax

from launch import cli
from ut.io import plots
from ut.io import reports
from ut.experiments import sweep
from ut.errors import UserError

_CONFIG = flags.DEFINE_string("config", None, "Config file with sweep(add).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep folder.")
_BATCHING = flags.DEFINE_enum("batching", "auto", ["auto", "vmap", "sequential"],
                              "auto: vmap groups unless on a single CPU device.")
_AGGREGATE_ONLY = flags.DEFINE_bool(
    "aggregate_only", False, "Train nothing: tabulate the finished runs.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False,
                                 "Call jax.distributed.initialize() (multi-host).")
_WORKERS = flags.DEFINE_integer(
    "workers", 1, "CPU only: train in this many processes, each pinned to its "
    "share of the CPUs; each takes the largest run (or vmapped group) not yet "
    "taken, half of them the sparse UT's runs first, the others last (they "
    "compete for memory bandwidth). E.g. the number of cores.")
_WORKER_INDEX = flags.DEFINE_integer("worker_index", None,
                                     "Set by --workers for its child processes.")
_WORKER_CLAIMS = flags.DEFINE_string("worker_claims", None,
                                     "Set by --workers for its child processes.")


_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.


def _worker_preexec(cpus, parent):
  """In a forked worker before it starts: pin it to `cpus`, and have Linux send
  it SIGTERM when the sweep process dies, even by SIGKILL (which runs no
  `finally`), so that no orphaned worker trains on."""
  os.sched_setaffinity(0, cpus)
  with contextlib.suppress(OSError, AttributeError):
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  if os.getppid() != parent:  # The sweep died before prctl took effect.
    os._exit(1)  # pylint: disable=protected-access


def run_workers(count):
  """Starts `count` worker processes and waits for all; fails if one failed.

  If this process stops (an error, Ctrl-C, SIGTERM), the workers are stopped
  too; if it is killed outright, Linux stops them (`_worker_preexec`).
  """
  claims = sweep.claims_folder(_WORKDIR.value)
  procs = []
  # SIGTERM (e.g. from a job scheduler) unwinds like Ctrl-C, through `finally`.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
  try:
    for i in range(count):
      argv, cpus = sweep.worker_command(sys.argv, i, count, claims)
      with warnings.catch_warnings():
        # JAX warns that forking its threads may deadlock; the child runs only
        # `_worker_preexec` and then execs a new Python, so it cannot.
        warnings.filterwarnings("ignore", r"os\.fork\(\) was called",
                                RuntimeWarning)
        procs.append(subprocess.Popen(argv, preexec_fn=functools.partial(
            _worker_preexec, cpus, os.getpid())))
    codes = [p.wait() for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.terminate()
    for p in procs:
      p.wait()
    shutil.rmtree(claims, ignore_errors=True)
    with contextlib.suppress(OSError):  # Other workers' claims may be there.
      os.rmdir(os.path.dirname(claims))
  failed = [i for i, c in enumerate(codes) if c]
  if failed:
    raise UserError(f"sweep worker(s) {failed} exited with {codes}; their "
                    "finished runs are kept, rerun the same command to resume")


def main(argv):
  del argv
  if _DISTRIBUTED.value:
    jax.distributed.initialize()
  started = time.time()
  workers = _WORKERS.value
  if workers < 1:
    raise UserError(f"--workers={workers}; use 1 or more")
  if workers > 1 and _WORKER_INDEX.value is None:
    if jax.default_backend() != "cpu" or _DISTRIBUTED.value:
      raise UserError("--workers is for CPU hosts; on GPU/TPU or multi-host a "
                      "sweep shards each group over the devices instead")
    if not _AGGREGATE_ONLY.value:
      run_workers(workers)
  elif _WORKER_INDEX.value is not None:
    sweep.run_sweep(_CONFIG.value, _WORKDIR.value, _BATCHING.value,
                    worker=(_WORKER_INDEX.value, workers, _WORKER_CLAIMS.value))
    return
  rows = sweep.run_sweep(_CONFIG.value, _WORKDIR.value, _BATCHING.value,
                         aggregate_only=_AGGREGATE_ONLY.value or workers > 1,
                         started=started)
  print(sweep.markdown_table(rows))
  module = sweep.load_config_module(_CONFIG.value)
  if hasattr(module, "PAPER") and jax.process_index() == 0:
    reports.write_text(os.path.join(_WORKDIR.value, "paper.md"),
                       plots.beside_paper(rows, module.PAPER, module.PANEL) + "\n")
  print(f"wrote {_WORKDIR.value}/table.csv, .json and .md")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
