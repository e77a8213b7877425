r"""What JAX's persistent compilation cache saves the test suite: the same
pytest command timed with the cache off, cold (an empty cache folder) and warm
(the folder the cold run filled), in turns, in fresh processes.

  python -m benchmarks.suite_bench                                   # 1 file
  python -m benchmarks.suite_bench --tests=tests/models_test.py,tests/compiled_test.py
  python -m benchmarks.record --out=results/bench/suite_bench.md -- \
      taskset -c 0 python -m benchmarks.suite_bench

tests/conftest.py turns the cache on for the in-process tests as the
launchers do (`launch.cli.use_compilation_cache`, folder $UT_JAX_CACHE;
empty: off), so "off" is UT_JAX_CACHE="". Cold is what a fresh clone on a new
machine pays; warm is every later run of the suite (and the second pytest
worker, for shapes the first already compiled). Prints the median wall time
of each, and off / cold and off / warm. Pin with `taskset -c ...`; the
children inherit it.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_TESTS = flags.DEFINE_list(
    "tests",
    ["tests/compiled_test.py"],
    "Test files or node ids, relative to the repository root.",
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 1, "Rounds of (off, cold, warm); medians.", lower_bound=1
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_pytest(tests, cache):
  """Wall seconds of one `pytest -q -m "not slow" tests` with UT_JAX_CACHE=cache."""
  env = dict(os.environ, UT_JAX_CACHE=cache)
  start = time.perf_counter()
  proc = subprocess.run(
      [
          sys.executable,
          "-m",
          "pytest",
          "-q",
          "-p",
          "no:cacheprovider",
          "-m",
          "not slow",
          *tests,
      ],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      check=False,
  )
  seconds = time.perf_counter() - start
  if proc.returncode:
    raise RuntimeError(
        f"pytest {' '.join(tests)} failed (cache {cache!r}):\n"
        f"{proc.stdout[-3000:]}"
    )
  return seconds


def main(argv):
  del argv
  tests = _TESTS.value
  for t in tests:
    if not os.path.exists(os.path.join(ROOT, t.split("::")[0])):
      sys.exit(f"error: --tests names {t!r}, which is not in {ROOT}/tests")
  times = {"off": [], "cold": [], "warm": []}
  for _ in range(_REPEATS.value):
    with tempfile.TemporaryDirectory() as cache:
      times["off"].append(run_pytest(tests, ""))
      times["cold"].append(run_pytest(tests, cache))
      times["warm"].append(run_pytest(tests, cache))
  med = {k: statistics.median(v) for k, v in times.items()}
  print(
      f"pytest -m 'not slow' {' '.join(tests)}: median wall seconds of "
      f"{_REPEATS.value} round(s), one process each"
  )
  print()
  print("| cache | seconds | off / this |")
  print("|-------|---------|------------|")
  for name, seconds in med.items():
    print(f"| {name} | {seconds:.2f} | {med['off'] / seconds:.2f} |")


if __name__ == "__main__":
  app.run(main)
