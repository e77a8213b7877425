r"""Import cost of the installed ml_dtypes against another version, in fresh
processes taking turns.

  taskset -c 0 python -m benchmarks.import_bench
  python -m benchmarks.record --out=results/bench/import_bench.md -- \
      taskset -c 0 python -m benchmarks.import_bench

Every JAX process imports ml_dtypes first (jax._src.dtypes). setup.cfg pins
the version; --other (default the release after the pin) is installed with
pip (no dependencies) into a temporary folder put first on PYTHONPATH, so
that the two differ in ml_dtypes alone. In turns, --processes fresh
processes each:

import  `import ml_dtypes`, then `import jax`, timed in the child (numpy is
        imported before the clock starts: both sides share it).
scale   `benchmarks.sparse_bench`'s scale run (H=2, L=10, d=64): its process
        time from its first import, the issue's whole-process figure.

Prints medians and the ratios other / installed, with the 2048^2 matmul
speed measured in this process.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

_OTHER = flags.DEFINE_string(
    "other",
    "ml_dtypes==0.7.0",
    "The pip requirement to compare the installed ml_dtypes against.",
)
_PROCESSES = flags.DEFINE_integer(
    "processes", 5, "Fresh processes per version and part.", lower_bound=1
)

_CHILD = """
import time
import numpy
t0 = time.perf_counter()
import ml_dtypes
t1 = time.perf_counter()
import jax
t2 = time.perf_counter()
print(ml_dtypes.__version__, t1 - t0, t2 - t0)
"""


def _env(path):
  parts = [path] if path else []
  parts.append(os.getcwd())
  return dict(os.environ, PYTHONPATH=os.pathsep.join(parts))


def _run(args, path):
  proc = subprocess.run(
      [sys.executable, *args],
      capture_output=True,
      text=True,
      check=False,
      env=_env(path),
  )
  if proc.returncode:
    raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-2000:]}")
  return proc.stdout


def _imports(path):
  version, ml_dtypes, jax = _run(["-c", _CHILD], path).split()
  return version, float(ml_dtypes), float(jax)


def _scale(path):
  out = _run(["-m", "benchmarks.sparse_bench", "--part=scale"], path)
  return float(re.search(r"process ([0-9.]+)s", out).group(1))


def main(argv):
  del argv
  from ut.io import roofline as roofline_lib  # pylint: disable=g-import-not-at-top

  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  with tempfile.TemporaryDirectory() as other:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            other,
            _OTHER.value,
        ],
        check=True,
    )
    paths = {"installed": None, "other": other}
    imports = {k: [] for k in paths}
    scale = {k: [] for k in paths}
    for _ in range(_PROCESSES.value):
      for k, path in paths.items():
        imports[k].append(_imports(path))
    for _ in range(_PROCESSES.value):
      for k, path in paths.items():
        scale[k].append(_scale(path))
  med = lambda rows, i: statistics.median(r[i] for r in rows)
  versions = {k: rows[0][0] for k, rows in imports.items()}
  print(
      f"[import] ml_dtypes {versions['installed']} (installed) against "
      f"{versions['other']} (--other={_OTHER.value}); medians of "
      f"{_PROCESSES.value} fresh processes each, in turns; 2048^2 matmul "
      f"{gflops:.0f} GFLOP/s"
  )
  print(
      f"  {'ml_dtypes':<10} {'import ml_dtypes s':>18} {'+ import jax s':>15}"
  )
  for k in paths:
    print(
        f"  {versions[k]:<10} {med(imports[k], 1):18.3f} "
        f"{med(imports[k], 2):15.3f}"
    )
  print(
      f"  ratio other / installed: import ml_dtypes "
      f"{med(imports['other'], 1) / med(imports['installed'], 1):.1f}x, with "
      f"jax {med(imports['other'], 2) / med(imports['installed'], 2):.2f}x"
  )
  sc = {k: statistics.median(v) for k, v in scale.items()}
  print(
      f"  scale run (H=2, L=10, d=64) process time: {versions['installed']} "
      f"{sc['installed']:.2f} s, {versions['other']} {sc['other']:.2f} s, "
      f"ratio {sc['other'] / sc['installed']:.2f}x"
  )
  print("  " + json.dumps(dict(gflops=round(gflops), versions=versions)))


if __name__ == "__main__":
  app.run(main)
