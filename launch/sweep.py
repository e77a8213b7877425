r"""Sweep entry point: python -m launch.sweep --config=configs/<table>.py --workdir=W.

Runs the config file's sweep(add) grid, batching runs that share shapes over
all devices, skipping runs already finished in W, and writes W/table.{csv,json,md}
and, when the config file has the paper's numbers (PAPER, PANEL), W/paper.md;
a config naming a report (REPORT, ut/experiments/figures.py) gets it too.
Compiled steps are cached in W/jax_cache (JAX's persistent compilation cache):
runs that differ only in their seed, and a restarted sweep, load the step
instead of compiling it again. A vmapped group checkpoints in W/groups/<hash>
every train.checkpoint_every steps (in a one-process sweep): a restarted sweep
resumes it there.

Several hosts (or several processes on one machine): start the same command
on every host with --distributed, which calls jax.distributed.initialize().
Each vmapped group's runs are then sharded over the devices of all processes;
only process 0 reads and writes W, so the hosts need not share a filesystem:

  python -m launch.sweep --config=... --workdir=W --distributed \
      --coordinator_address=HOST0:1234 --num_processes=2 --process_id=I

with I = 0 on the host named in --coordinator_address (a free port there),
1, 2, ... on the others. On a cluster JAX detects (Slurm, Open MPI, Cloud TPU,
Kubernetes) the three flags may be left out; JAX_COORDINATOR_ADDRESS
stands in for --coordinator_address. CPU hosts exchange data through gloo.
Compiled-UT runs are left to a one-process rerun of the same command.
"""

import contextlib
import os
import shutil
import sys
import time

from absl import flags
import jax

from launch import cli
from ut.cpu import workers
from ut.errors import UserError
from ut.experiments import figures
from ut.experiments import sweep
from ut.io import plots
from ut.io import reports
from ut.io import roofline

_CONFIG = flags.DEFINE_string("config", None, "Config file with sweep(add).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep folder.")
_BATCHING = flags.DEFINE_enum(
    "batching",
    "auto",
    ["auto", "vmap", "sequential"],
    "auto: vmap groups unless on a single CPU device.",
)
_AGGREGATE_ONLY = flags.DEFINE_bool(
    "aggregate_only", False, "Train nothing: tabulate the finished runs."
)
_TEST_EACH = flags.DEFINE_bool(
    "test_each",
    False,
    "Every run also scores its test set at each evaluation "
    "(config.eval.test_each: the table gains 'test at best valid'); its "
    "configs then differ from runs recorded without it: use a new --workdir.",
)
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() (multi-host)."
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address",
    None,
    "With --distributed: host:port of process 0 "
    "(default: detected from the cluster, or JAX_COORDINATOR_ADDRESS).",
)
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "With --distributed: how many processes in all."
)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id",
    None,
    "With --distributed: this process's index, 0 to "
    "--num_processes - 1; 0 runs the coordinator and writes the files.",
)
_WORKERS = flags.DEFINE_integer(
    "workers",
    1,
    "CPU only: train in this many processes, each pinned to its "
    "share of the CPUs; each takes the largest run (or vmapped group) not yet "
    "taken, half of them the sparse UT's runs first, the others last (they "
    "compete for memory bandwidth). E.g. the number of cores.",
)
_WORKER_INDEX = flags.DEFINE_integer(
    "worker_index", None, "Set by --workers for its child processes."
)
_WORKER_CLAIMS = flags.DEFINE_string(
    "worker_claims", None, "Set by --workers for its child processes."
)


def run_workers(count):
  """Runs `count` pinned worker processes (`ut.cpu.workers.run_pinned`); fails
  if one failed. Their claims folder is removed when they are done."""
  claims = sweep.claims_folder(_WORKDIR.value)
  try:
    codes = workers.run_pinned(
        [sweep.worker_command(sys.argv, i, count, claims) for i in range(count)]
    )
  finally:
    shutil.rmtree(claims, ignore_errors=True)
    with contextlib.suppress(OSError):  # Other workers' claims may be there.
      os.rmdir(os.path.dirname(claims))
  failed = [i for i, c in enumerate(codes) if c]
  if failed:
    raise UserError(
        f"sweep worker(s) {failed} exited with {codes}; their "
        "finished runs are kept, rerun the same command to resume"
    )


def distributed():
  """--distributed, before JAX's backend starts (cli.run)."""
  if _DISTRIBUTED.value:
    jax.distributed.initialize(
        _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value
    )


def main(argv):
  del argv
  started = time.time()
  overrides = {"eval.test_each": True} if _TEST_EACH.value else None
  count = _WORKERS.value
  if count < 1:
    raise UserError(f"--workers={count}; use 1 or more")
  if count > 1 and _WORKER_INDEX.value is None:
    if jax.default_backend() != "cpu" or _DISTRIBUTED.value:
      raise UserError(
          "--workers is for CPU hosts; on GPU/TPU or multi-host a "
          "sweep shards each group over the devices instead"
      )
    if not _AGGREGATE_ONLY.value:
      run_workers(count)
  elif _WORKER_INDEX.value is not None:
    sweep.run_sweep(
        _CONFIG.value,
        _WORKDIR.value,
        _BATCHING.value,
        worker=(_WORKER_INDEX.value, count, _WORKER_CLAIMS.value),
        overrides=overrides,
    )
    return
  rows = sweep.run_sweep(
      _CONFIG.value,
      _WORKDIR.value,
      _BATCHING.value,
      aggregate_only=_AGGREGATE_ONLY.value or count > 1,
      started=started,
      overrides=overrides,
  )
  if rows is None:  # Not process 0 of a multi-process sweep: it writes.
    return
  print(sweep.markdown_table(rows))
  module = sweep.load_config_module(_CONFIG.value)
  if hasattr(module, "PAPER") or hasattr(module, "REPORT"):
    gflops = roofline.rate(roofline.make())[0] / 1e9
  if hasattr(module, "PAPER"):
    reports.write_markdown(
        os.path.join(_WORKDIR.value, "paper.md"),
        plots.beside_paper(rows, module.PAPER, module.PANEL),
        sweep.cost_note(rows, gflops),
    )
  runs = plots.run_curves(_WORKDIR.value, rows)
  runs.update(plots.unfinished_curves(sweep.unfinished_runs(_WORKDIR.value)))
  if runs:  # Every run's validation curve, on a log step axis.
    plots.curves(runs, title=_CONFIG.value).savefig(
        os.path.join(_WORKDIR.value, "curves.png"), dpi=120
    )
  if hasattr(module, "REPORT"):  # The report the config names (figures.REPORTS).
    figures.write(
        module, _WORKDIR.value, rows, cost=sweep.cost_note(rows, gflops)
    )
  print(f"wrote {_WORKDIR.value}/table.csv, .json and .md")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main, before_backend=distributed)
