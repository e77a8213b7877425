r"""Cold-cache time of the simulate table, the threshold sweep and the scale
run, and how many XLA compilations they take.

  python -m benchmarks.simulate_bench                      # the table, this tree
  python -m benchmarks.simulate_bench --part=threshold     # configs/threshold.py
  python -m benchmarks.simulate_bench --part=scale         # H=2, L=10, d=64
  python -m benchmarks.simulate_bench --baseline=REV       # and at a commit REV

Each run is a fresh process without JAX's persistent compilation cache (the
launchers' UT_JAX_CACHE is never read), in float64 mode as `launch.simulate`
and `launch.threshold` run: every program compiles, as from a fresh clone. A
run reports the table time (the sum of the table's per-row `seconds`, or the
threshold sweep's `wall_seconds`, or the time of the tree's
`benchmarks.sparse_bench --part=scale`: build, compile, simulate-check), its XLA
compilations (count and seconds, from jax.monitoring), the process's wall time
from before its imports, and its peak RSS. --baseline=REV runs the same
config of `git archive REV` (extracted to a temporary folder; the working tree
is not touched) in turns with this tree's, and prints baseline / this tree.
Pin with `taskset -c ...` to time on given CPUs; the children inherit it.
"""

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

_PART = flags.DEFINE_enum(
    "part",
    "table",
    ["table", "threshold", "scale"],
    "Which experiment to time.",
)
_BASELINE = flags.DEFINE_string(
    "baseline", None, "A git revision to time beside this tree."
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 1, "Cold runs of each tree (median reported).", lower_bound=1
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in the tree being timed (its cwd), so that it works for older trees too:
# it uses only run_table / threshold.run, the configs' defaults, and
# sparse_bench.bench_scale.
_CHILD = r"""
import time
start = time.perf_counter()
import json, os, resource, sys
import jax
jax.config.update("jax_enable_x64", True)  # As the launchers.
compiles = []
def on_duration(event, seconds, **kwargs):
  if event == "/jax/core/compile/backend_compile_duration":
    compiles.append(seconds)
jax.monitoring.register_event_duration_secs_listener(on_duration)
part, workdir = sys.argv[1:]
if part == "table":
  from configs import simulate as config_lib
  from ut.experiments import simulate_table
  rows = simulate_table.run_table(config_lib.get_config(), workdir)
  seconds = sum(r["seconds"] for r in rows)
elif part == "threshold":
  from configs import threshold as config_lib
  from ut.experiments import threshold
  threshold.run(config_lib.get_config(), workdir)
  with open(os.path.join(workdir, "threshold.json")) as f:
    seconds = json.load(f)["wall_seconds"]
else:  # benchmarks/sparse_bench.py's scale part, as that tree has it.
  from benchmarks import sparse_bench
  jax.config.update("jax_enable_x64", False)  # As sparse_bench runs it.
  t0 = time.perf_counter()
  sparse_bench.bench_scale()
  seconds = time.perf_counter() - t0
print("RESULT " + json.dumps(dict(
    seconds=seconds, compiles=len(compiles), compile_seconds=sum(compiles),
    wall=time.perf_counter() - start,
    peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)))
"""


def run_once(tree, part):
  """One cold run of `part` in `tree`: dict(seconds, compiles, ...)."""
  with tempfile.TemporaryDirectory() as workdir:
    env = dict(os.environ, PYTHONPATH=tree, UT_JAX_CACHE="")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, part, workdir],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
  if proc.returncode:
    raise RuntimeError(f"{part} in {tree} failed:\n{proc.stderr[-3000:]}")
  line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT ") :])


def extract(rev, folder):
  """`git archive rev` of this repository, extracted into folder."""
  subprocess.run(
      f"git -C {shlex.quote(ROOT)} archive {shlex.quote(rev)} "
      f"| tar -x -C {shlex.quote(folder)}",
      shell=True,
      check=True,
  )


def summary(runs):
  med = lambda key: statistics.median(r[key] for r in runs)
  return dict(
      seconds=med("seconds"),
      compiles=med("compiles"),
      compile_seconds=med("compile_seconds"),
      wall=med("wall"),
      peak_gb=max(r.get("peak_gb", 0) for r in runs),
  )


def main(argv):
  del argv
  part = _PART.value
  trees = {"this tree": ROOT}
  with tempfile.TemporaryDirectory() as baseline_dir:
    if _BASELINE.value:
      extract(_BASELINE.value, baseline_dir)
      trees = {f"baseline {_BASELINE.value}": baseline_dir, **trees}
    runs = {name: [] for name in trees}
    for _ in range(_REPEATS.value):  # In turns: the same noise on both.
      for name, tree in trees.items():
        runs[name].append(run_once(tree, part))
  print(
      f"[{part}] cold compilation cache, median of {_REPEATS.value} "
      f"fresh process(es) (peak RSS: their max):"
  )
  results = {name: summary(r) for name, r in runs.items()}
  for name, r in results.items():
    print(
        f"  {name:>24}: {part} time {r['seconds']:6.2f}s, "
        f"{r['compiles']:4.0f} compilations ({r['compile_seconds']:.2f}s), "
        f"process {r['wall']:.2f}s, peak RSS {r['peak_gb']:.2f} GB"
    )
  if len(results) == 2:
    base, mine = results.values()
    print(
        f"  baseline / this tree: {part} time "
        f"{base['seconds'] / mine['seconds']:.2f}x, compilations "
        f"{base['compiles'] / max(mine['compiles'], 1):.1f}x, compile time "
        f"{base['compile_seconds'] / max(mine['compile_seconds'], 1e-9):.2f}x, "
        f"process {base['wall'] / mine['wall']:.2f}x"
    )


if __name__ == "__main__":
  app.run(main)
