r"""NumPy's transparent huge pages on and off: fresh arrays and the scale run.

  taskset -c 0 python -m benchmarks.hugepage_bench
  python -m benchmarks.record --out=results/bench/hugepage_bench.md -- \
      taskset -c 0 python -m benchmarks.hugepage_bench

NumPy asks the kernel for transparent huge pages (madvise) for its large
arrays on Linux (`ut.cpu.host.numpy_hugepages` switches it). Where the
kernel's transparent_hugepage/defrag is "madvise", a fault in such an array
may compact memory first. Printed, with the host's THP settings and the
2048^2 matmul speed:

fresh   in this process, interleaved round by round: --arrays fresh --mb
        megabyte float64 arrays filled with ones (np.ones: allocated and
        faulted in), held at once, with huge pages on and off; per array,
        medians of --repeats rounds, minor page faults (getrusage), and the
        ratio. glibc maps each such array anew and unmaps it when freed, so
        every round faults afresh; how slow a huge-page fault is depends on
        how much free memory the kernel must compact (other processes).
scale   `benchmarks.sparse_bench`'s scale run (H=2, L=10, d=64) in fresh child
        processes, in turns with huge pages on and off (--processes each):
        medians of its total (build, compile, simulate-check) and of the
        process's time from its first import, and the ratios.
"""

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

from ut.cpu import host
from ut.io import roofline as roofline_lib

_MB = flags.DEFINE_integer("mb", 134, "Fresh array size in megabytes.")
_REPEATS = flags.DEFINE_integer(
    "repeats", 7, "Rounds of fresh arrays per setting.", lower_bound=1
)
_ARRAYS = flags.DEFINE_integer(
    "arrays", 4, "Fresh arrays held at once in a round.", lower_bound=1
)
_PROCESSES = flags.DEFINE_integer(
    "processes", 3, "Scale-run processes per setting (0: none).", lower_bound=0
)

_CHILD = r"""
import sys
from benchmarks import sparse_bench
sparse_bench.bench_scale(numpy_hugepages=sys.argv[1] == "on")
"""
_SETTINGS = {"on": True, "off": False}


def _thp():
  out = {}
  for name in ("enabled", "defrag"):
    try:
      with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
        out[name] = f.read().strip()
    except OSError:
      out[name] = "unknown"
  return out


def _fresh(n, count):
  """(seconds, minor faults) per array of `count` fresh arrays of n float64
  ones, held at once (as the scale run holds E, its stacked and its float32
  copies), then freed."""
  f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  t0 = time.perf_counter()
  arrays = [np.ones(n) for _ in range(count)]
  seconds = time.perf_counter() - t0
  faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
  del arrays
  return seconds / count, faults / count


def _scale(setting):
  proc = subprocess.run(
      [sys.executable, "-c", _CHILD, setting],
      capture_output=True,
      text=True,
      check=False,
      env=dict(os.environ, PYTHONPATH=os.getcwd()),
  )
  if proc.returncode:
    raise SystemExit(f"scale run failed:\n{proc.stderr[-2000:]}")
  total = float(re.search(r"total ([0-9.]+)s", proc.stdout).group(1))
  process = float(re.search(r"process ([0-9.]+)s", proc.stdout).group(1))
  peak = float(re.search(r"peak RSS ([0-9.]+) GB", proc.stdout).group(1))
  return dict(total=total, process=process, peak_gb=peak)


def main(argv):
  del argv
  previous = host.numpy_hugepages(True)
  if previous is None:
    raise SystemExit("this NumPy has no madvise hugepage switch")
  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  n = _MB.value * 2**20 // 8
  fresh = {s: [] for s in _SETTINGS}
  for _ in range(_REPEATS.value):
    for s, on in _SETTINGS.items():
      host.numpy_hugepages(on)
      fresh[s].append(_fresh(n, _ARRAYS.value))
  host.numpy_hugepages(previous)
  scale = {s: [] for s in _SETTINGS}
  for _ in range(_PROCESSES.value):
    for s in _SETTINGS:
      scale[s].append(_scale(s))
  thp = _thp()
  print(
      f"[hugepage] THP enabled: {thp['enabled']}; defrag: {thp['defrag']}; "
      f"2048^2 matmul {gflops:.0f} GFLOP/s"
  )
  med = lambda rows, i: statistics.median(r[i] for r in rows)
  print(
      f"  fresh {_MB.value} MB float64 arrays, {_ARRAYS.value} held at once; "
      f"per array, medians of {_REPEATS.value} rounds:"
  )
  print(f"    {'hugepages':<9} {'seconds':>8} {'faults':>7}")
  for s in _SETTINGS:
    print(f"    {s:<9} {med(fresh[s], 0):8.3f} {med(fresh[s], 1):7.0f}")
  print(f"    ratio on / off: {med(fresh['on'], 0) / med(fresh['off'], 0):.2f}")
  if _PROCESSES.value:
    print(
        f"  scale run (H=2, L=10, d=64), medians of {_PROCESSES.value} "
        "processes each, in turns:"
    )
    print(
        f"    {'hugepages':<9} {'total s':>8} {'process s':>10} {'peak GB':>8}"
    )
    for s in _SETTINGS:
      rows = scale[s]
      print(
          f"    {s:<9} {med(rows, 'total'):8.2f} {med(rows, 'process'):10.2f} "
          f"{med(rows, 'peak_gb'):8.2f}"
      )
    ratio = lambda k: med(scale["on"], k) / med(scale["off"], k)
    print(
        f"    ratio on / off: total {ratio('total'):.2f}, "
        f"process {ratio('process'):.2f}"
    )
  print("  " + json.dumps(dict(thp=thp, gflops=round(gflops))))


if __name__ == "__main__":
  app.run(main)
