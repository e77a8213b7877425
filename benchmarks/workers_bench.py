r"""How many sweep processes to run on a CPU host: one, N single-threaded, or threads.

  python -m benchmarks.workers_bench                 # < 3 min on 2 CPUs
  python -m benchmarks.workers_bench --workers=2 --cases=khop_random_attn_k2

Each case is the train step of a default config (the configs `launch.sweep`
runs), timed in fresh processes three ways, side by side in one invocation:

alone     one process with XLA's CPU threads off (`ut.sweep.single_threaded_env`),
          as `launch.sweep --workers` starts its workers;
together  --workers such processes started at once; each waits, warmed up, until
          all are, so their timed blocks run at the same time;
threads   one process with XLA's default threads.

A process compiles the step, runs it once, then times --repeats blocks of whole
steps on one batch and prints the median ms/step. Reported per case: the
slow-down of a process among `together` against `alone`, the throughput of the
workers against one process alone (workers * alone / together: above 1 means
`--workers` finishes a sweep sooner), and threads against alone.
"""

import functools
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

_WORKERS = flags.DEFINE_integer("workers", 2, "Processes run together.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed blocks (median reported).")
_BLOCK_S = flags.DEFINE_float("block_s", 1.0, "Least seconds per timed block.")
_CASES = flags.DEFINE_list("cases", None, "Case names (default: all).")
_CHILD = flags.DEFINE_string("child", None, "Internal: time this case, print ms.")

# (config file, argument): default configs of the tables' sweeps.
CASES = {
    "dyck_random_attn": ("dyck", "model=random,variant=attn"),
    "dyck_sparse_res_ln": ("dyck", "model=sparse,variant=res_ln"),
    "khop_random_attn_k2": ("khop", "model=random,variant=attn,k=2"),
    "khop_sparse_res_ln_k2": ("khop", "model=sparse,variant=res_ln,k=2"),
}


def time_case(name, repeats, block_s):
  """Median ms per train step of one case, in this process."""
  import jax  # pylint: disable=g-import-not-at-top
  from configs import dyck  # pylint: disable=g-import-not-at-top
  from configs import khop  # pylint: disable=g-import-not-at-top
  from ut import data as data_lib  # pylint: disable=g-import-not-at-top
  from ut import train  # pylint: disable=g-import-not-at-top
  module, arg = CASES[name]
  config = {"dyck": dyck, "khop": khop}[module].get_config(arg)
  task = data_lib.make_task(config)
  spec = train.model_spec(config, task.info)
  state, tx, _ = train.init_state(config, spec)
  batch = jax.device_put(train.train_batch(config, task, 0))
  step = jax.jit(functools.partial(train.train_step, spec=spec, tx=tx),
                 donate_argnums=0)
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


def _spawn(name, single_thread):
  from ut import sweep  # pylint: disable=g-import-not-at-top
  env = sweep.single_threaded_env(os.environ) if single_thread else dict(os.environ)
  return subprocess.Popen(
      [sys.executable, "-m", "benchmarks.workers_bench", f"--child={name}",
       f"--repeats={_REPEATS.value}", f"--block_s={_BLOCK_S.value}"],
      env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)


def _ms(procs):
  """Median ms/step of each process; their timed blocks start together."""
  for p in procs:  # Each says "ready" after compiling and warming up.
    if p.stdout.readline().strip() != "ready":
      p.wait()
      raise RuntimeError("a timing process failed: " + p.stderr.read()[-2000:])
  outs = [p.communicate("go\n") for p in procs]
  for p, (_, err) in zip(procs, outs):
    if p.returncode:
      raise RuntimeError("a timing process failed: " + err[-2000:])
  return [float(out.strip().splitlines()[-1]) for out, _ in outs]


def main(argv):
  del argv
  if _CHILD.value:
    print(f"{time_case(_CHILD.value, _REPEATS.value, _BLOCK_S.value):.4f}")
    return
  names = _CASES.value or list(CASES)
  unknown = sorted(set(names) - set(CASES))
  if unknown:
    raise app.UsageError(f"unknown case(s) {unknown}; choose from {list(CASES)}")
  w = _WORKERS.value
  if w < 1:
    raise app.UsageError(f"--workers={w}; use 1 or more")
  load = os.getloadavg()[0]
  print(f"[workers] {os.cpu_count()} CPUs, 1-min load average {load:.1f}; "
        f"{w} processes together; medians of {_REPEATS.value} blocks")
  print(f"{'case':24s} {'alone':>8s} {'together':>9s} {'threads':>8s} "
        f"{'slow-down':>9s} {'workers/1':>9s} {'threads/1':>9s}")
  print(f"{'':24s} {'ms/step':>8s} {'ms/step':>9s} {'ms/step':>8s}")
  for name in names:
    alone = _ms([_spawn(name, True)])[0]
    together = statistics.median(_ms([_spawn(name, True) for _ in range(w)]))
    threads = _ms([_spawn(name, False)])[0]
    print(f"{name:24s} {alone:8.2f} {together:9.2f} {threads:8.2f} "
          f"{together / alone:9.2f} {w * alone / together:9.2f} "
          f"{alone / threads:9.2f}")


if __name__ == "__main__":
  app.run(main)
