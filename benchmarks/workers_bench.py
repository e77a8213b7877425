r"""How to run a sweep on a CPU host: one process, or N workers pinned or not.

  python -m benchmarks.workers_bench                 # < 3 min on 2 CPUs
  python -m benchmarks.workers_bench --workers=2 --cases=khop_random_attn_k2
  python -m benchmarks.workers_bench --pairs=khop_sparse_res_ln_mlp_k3:khop_random_res_ln_mlp_k4

Each case is the train step of a default config (the configs `launch.sweep`
runs), timed in fresh processes three ways, side by side in one invocation:

alone     one process on all the CPUs (XLA runs independent ops of a step on
          several of them);
unpinned  --workers such processes at once, each free to use every CPU;
pinned    --workers such processes at once, each pinned to its share of the
          CPUs (`ut.cpu.workers.worker_cpus`), as `launch.sweep --workers` starts them.

--pairs=A:B instead times two cases as two pinned workers (`worker_cpus` of
2): each alone on its share, beside its twin, and beside the other case. The
sweep's `ut.cpu.workers.worker_order` keeps the sparse UT's memory-bound runs apart when it
can; `mixed/twins` is (A beside B + B beside A) / (A beside A + B beside B),
the time of a step of each mixed against twinned: below 1, mixing wins.

Processes run together start their timed blocks at once: each waits, warmed up,
until all are. A process compiles the step, runs it once, then times --repeats
blocks of whole steps on one batch and prints the median ms/step. Reported per
case: ms/step of each way (the median over processes), and the throughput of the
workers against one process alone (workers * alone / together: above 1 means
`--workers` finishes a sweep sooner than one process).
"""

import functools
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

_WORKERS = flags.DEFINE_integer(
    "workers", 2, "Processes run together.", lower_bound=1
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 5, "Timed blocks (median reported).", lower_bound=1
)
_BLOCK_S = flags.DEFINE_float("block_s", 1.0, "Least seconds per timed block.")
_CASES = flags.DEFINE_list("cases", None, "Case names (default: all).")
_PAIRS = flags.DEFINE_list(
    "pairs",
    None,
    "CASE_A:CASE_B pairs to time as two pinned workers: alone, "
    "beside a twin and beside each other (instead of --cases).",
)
_CHILD = flags.DEFINE_string(
    "child", None, "Internal: time this case, print ms."
)

# (config file, argument): default configs of the tables' sweeps.
CASES = {
    "dyck_random_attn": ("dyck", "model=random,variant=attn"),
    "dyck_sparse_res_ln": ("dyck", "model=sparse,variant=res_ln"),
    "khop_random_attn_k2": ("khop", "model=random,variant=attn,k=2"),
    "khop_sparse_res_ln_k2": ("khop", "model=sparse,variant=res_ln,k=2"),
    "khop_sparse_res_ln_mlp_k4": (
        "khop",
        "model=sparse,variant=res_ln_mlp,k=4",
    ),
    "khop_sparse_res_ln_mlp_k3": (
        "khop",
        "model=sparse,variant=res_ln_mlp,k=3",
    ),
    "khop_random_res_ln_mlp_k4": (
        "khop",
        "model=random,variant=res_ln_mlp,k=4",
    ),
}
# Cases of the default run (the last two are for --pairs).
DEFAULT_CASES = tuple(CASES)[:5]


def time_case(name, repeats, block_s):
  """Median ms per train step of one case, in this process."""
  import jax  # pylint: disable=g-import-not-at-top

  from configs import dyck  # pylint: disable=g-import-not-at-top
  from configs import khop  # pylint: disable=g-import-not-at-top
  from ut.training import data as data_lib  # pylint: disable=g-import-not-at-top
  from ut.training import train  # pylint: disable=g-import-not-at-top

  module, arg = CASES[name]
  config = {"dyck": dyck, "khop": khop}[module].get_config(arg)
  task = data_lib.make_task(config)
  spec = train.model_spec(config, task.info)
  state, tx, _ = train.init_state(config, spec)
  batch = jax.device_put(train.train_batch(config, task, 0))
  step = jax.jit(
      functools.partial(train.train_step, spec=spec, tx=tx), donate_argnums=0
  )
  holder = [step(state, batch)[0]]

  def run(n):
    start = time.perf_counter()
    for _ in range(n):
      holder[0], metrics = step(holder[0], batch)
      jax.block_until_ready(metrics)
    return time.perf_counter() - start

  n = max(1, int(block_s / run(1)))
  print("ready", flush=True)  # Wait until every process is warm: then time.
  sys.stdin.readline()
  return statistics.median(1e3 * run(n) / n for _ in range(repeats))


def _spawn(name, cpus=None):
  """A timing process for case `name`, pinned to `cpus` unless None."""
  return subprocess.Popen(
      [
          sys.executable,
          "-m",
          "benchmarks.workers_bench",
          f"--child={name}",
          f"--repeats={_REPEATS.value}",
          f"--block_s={_BLOCK_S.value}",
      ],
      preexec_fn=None
      if cpus is None
      else lambda: os.sched_setaffinity(0, cpus),
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
  )


def _ms(procs):
  """Median ms/step of each process; their timed blocks start together."""
  for p in procs:  # Each says "ready" after compiling and warming up.
    if p.stdout.readline().strip() != "ready":
      p.wait()
      raise RuntimeError("a timing process failed: " + p.stderr.read()[-2000:])
  for p in procs:  # All at once (communicate() would start them one by one).
    p.stdin.write("go\n")
    p.stdin.flush()
  outs = [p.communicate() for p in procs]
  for p, (_, err) in zip(procs, outs):
    if p.returncode:
      raise RuntimeError("a timing process failed: " + err[-2000:])
  return [float(out.strip().splitlines()[-1]) for out, _ in outs]


def _check_cases(names):
  unknown = sorted(set(names) - set(CASES))
  if unknown:
    raise app.UsageError(
        f"unknown case(s) {unknown}; choose from {list(CASES)}"
    )


def time_pairs(pairs):
  """--pairs: each pair as two pinned workers, alone, twinned and mixed."""
  from ut.cpu import workers  # pylint: disable=g-import-not-at-top

  cpus = [workers.worker_cpus(i, 2) for i in range(2)]
  print(
      f"{'pair A:B':52s} {'A alone':>8s} {'A|A':>7s} {'A|B':>7s} "
      f"{'B alone':>8s} {'B|B':>7s} {'B|A':>7s} {'mixed/twins':>11s}"
  )
  for pair in pairs:
    a, b = pair.split(":")
    a_alone = _ms([_spawn(a, cpus[0])])[0]
    b_alone = _ms([_spawn(b, cpus[1])])[0]
    a_twin = statistics.median(_ms([_spawn(a, c) for c in cpus]))
    b_twin = statistics.median(_ms([_spawn(b, c) for c in cpus]))
    a_mixed, b_mixed = _ms([_spawn(a, cpus[0]), _spawn(b, cpus[1])])
    print(
        f"{pair:52s} {a_alone:8.1f} {a_twin:7.1f} {a_mixed:7.1f} "
        f"{b_alone:8.1f} {b_twin:7.1f} {b_mixed:7.1f} "
        f"{(a_mixed + b_mixed) / (a_twin + b_twin):11.3f}"
    )
  print(
      "ms/step; A|B: A's step beside B's, each process pinned to one "
      "worker's CPUs"
  )


def main(argv):
  del argv
  if _CHILD.value:
    print(f"{time_case(_CHILD.value, _REPEATS.value, _BLOCK_S.value):.4f}")
    return
  if _PAIRS.value:
    if any(p.count(":") != 1 for p in _PAIRS.value):
      raise app.UsageError(
          f"--pairs={','.join(_PAIRS.value)}: write each pair "
          "as CASE_A:CASE_B"
      )
    _check_cases([c for p in _PAIRS.value for c in p.split(":")])
    print(
        f"[workers] {os.cpu_count()} CPUs, 1-min load average "
        f"{os.getloadavg()[0]:.1f}; medians of {_REPEATS.value} blocks"
    )
    time_pairs(_PAIRS.value)
    return
  names = _CASES.value or list(DEFAULT_CASES)
  _check_cases(names)
  w = _WORKERS.value
  if w < 1:
    raise app.UsageError(f"--workers={w}; use 1 or more")
  load = os.getloadavg()[0]
  print(
      f"[workers] {os.cpu_count()} CPUs, 1-min load average {load:.1f}; "
      f"{w} processes together; medians of {_REPEATS.value} blocks"
  )
  from ut.cpu import workers  # pylint: disable=g-import-not-at-top

  print(
      f"{'case':24s} {'alone':>8s} {'unpinned':>9s} {'pinned':>8s} "
      f"{'unpinned/1':>10s} {'pinned/1':>9s}"
  )
  print(
      f"{'':24s} {'ms/step':>8s} {'ms/step':>9s} {'ms/step':>8s} "
      f"{'throughput':>10s} {'throughput':>9s}"
  )
  for name in names:
    alone = _ms([_spawn(name)])[0]
    unpinned = statistics.median(_ms([_spawn(name) for _ in range(w)]))
    pinned = statistics.median(
        _ms([_spawn(name, workers.worker_cpus(i, w)) for i in range(w)])
    )
    print(
        f"{name:24s} {alone:8.2f} {unpinned:9.2f} {pinned:8.2f} "
        f"{w * alone / unpinned:10.2f} {w * alone / pinned:9.2f}"
    )


if __name__ == "__main__":
  app.run(main)
