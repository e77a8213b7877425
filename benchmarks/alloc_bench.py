r"""Why a large elementwise op runs far below the copy bandwidth: allocation.

  taskset -c 0 python -m benchmarks.alloc_bench
  taskset -c 0 python -m benchmarks.alloc_bench --mb=64 --step=none
  taskset -c 0 python -m benchmarks.alloc_bench --step=model=sparse --step=model=trained
  taskset -c 0 python -m benchmarks.alloc_bench --step=none --step="$ZA"  # ZA: below

Zhong & Andreas's size (issue 18): ZA="model=random,variant=res_ln_mlp|model.m=16,
model.num_heads=4,model.head_width=4,model.mlp_ratio=4,train.batch_size=1000".

In this process, over a --mb megabyte float32 array (each read and written
once, so bytes = 2 x size), interleaved round by round with the roofline:
  numpy copy into a preallocated array / into a fresh one (x.copy());
  jax a * 2 + 1 with a fresh output / donated (written in place);
  and the minor page faults per call (getrusage) of each.
Then, each in a child process of this interpreter (same flags), the jax
fresh-output op and the Dyck training step of each --step (configs/dyck.py
arguments; batch 128, T = 61; one batch, a donated state) under
each allocator found on this machine: glibc (default), glibc as every
launcher sets it on CPU before JAX starts (`ut.cpu.host.tune_malloc`: one
arena, no mmap for large blocks, freed memory kept), glibc with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (transparent huge pages for its
mmapped chunks), and tcmalloc and jemalloc by LD_PRELOAD where installed
(Debian: libtcmalloc-minimal4, libjemalloc2). Times are medians of
--repeats calls; ratios are against glibc in the same run.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from ut.cpu import host
from ut.io import roofline as roofline_lib

_MB = flags.DEFINE_integer("mb", 256, "Array size in megabytes.")
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per contender.")
_STEPS = flags.DEFINE_multi_string(
    "step",
    ["model=trained,variant=res_ln_mlp", "model=random,variant=attn,m=512"],
    "configs/dyck.py argument of a training step to time, optionally with "
    "'|section.field=value,...' overrides (repeat the flag for several); "
    "none: no step.",
)
_CHILD = flags.DEFINE_string("child", "", "Internal: measure and print JSON.")

LIBS = "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"
ALLOCATORS = {
    "glibc": {},
    # What every launcher does on CPU before JAX starts (configs/cpu.py).
    "glibc+tune_malloc": {"UT_BENCH_TUNE_MALLOC": "1"},
    "glibc+hugetlb": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "tcmalloc": {"LD_PRELOAD": "libtcmalloc_minimal.so.4"},
    "jemalloc": {"LD_PRELOAD": "libjemalloc.so.2"},
}


def _faults():
  return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(fn, repeats):
  """(median seconds, median minor page faults) of fn() over `repeats` calls."""
  jax.block_until_ready(fn())
  times, faults = [], []
  for _ in range(repeats):
    f0, t0 = _faults(), time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
    faults.append(_faults() - f0)
  return statistics.median(times), statistics.median(faults)


def in_process(mb, repeats):
  n = mb * 2**20 // 4
  x = np.random.default_rng(0).random(n, dtype=np.float32)
  y = np.empty_like(x)
  xd = jnp.asarray(x)
  fresh = jax.jit(lambda a: a * 2.0 + 1.0)
  donating = jax.jit(lambda a: a * 2.0 + 1.0, donate_argnums=0)
  held = [jnp.asarray(x)]

  def donated():
    held[0] = donating(held[0])
    return held[0]

  contenders = {
      "numpy copy, preallocated": lambda: np.copyto(y, x),
      "numpy copy, fresh array": x.copy,
      "jax a*2+1, fresh output": lambda: fresh(xd),
      "jax a*2+1, donated": donated,
  }
  rows = []
  for name, fn in contenders.items():
    seconds, faults = measure(fn, repeats)
    rows.append(
        dict(
            op=name,
            ms=1e3 * seconds,
            gb_per_s=2 * x.nbytes / seconds / 1e9,
            faults_per_call=faults,
            pages=x.nbytes // resource.getpagesize(),
        )
    )
  return rows


def child(mode, mb, repeats):
  """One measurement in this (child) process, as a JSON line."""
  if os.environ.get("UT_BENCH_TUNE_MALLOC"):
    host.tune_malloc()  # Before the first array: JAX's threads start then.
  if mode == "elementwise":
    xd = jnp.asarray(np.ones(mb * 2**20 // 4, np.float32))
    fresh = jax.jit(lambda a: a * 2.0 + 1.0)
    seconds, faults = measure(lambda: fresh(xd), repeats)
    out = dict(ms=1e3 * seconds, gb_per_s=2 * xd.nbytes / seconds / 1e9)
  else:
    from configs import cpu as cpu_config  # pylint: disable=g-import-not-at-top
    from configs import dyck  # pylint: disable=g-import-not-at-top
    from ut.training import data as data_lib  # pylint: disable=g-import-not-at-top
    from ut.training import train  # pylint: disable=g-import-not-at-top

    arg, _, overrides = mode.removeprefix("step:").partition("|")
    config = cpu_config.overlay(dyck.get_config(arg))  # As launchers on CPU.
    for item in filter(None, overrides.split(",")):
      dotted, value = item.split("=")
      section, field = dotted.split(".")
      config[section][field] = type(config[section][field])(value)
    task = data_lib.make_task(config)
    spec = train.model_spec(config, task.info)
    state, tx, _ = train.init_state(config, spec)
    step_fn, place_state, place_batch = train.make_step(config, spec, tx)
    holder = [place_state(state)]
    batch = place_batch(train.train_batch(config, task, 0))

    def step():
      holder[0], metrics = step_fn(holder[0], batch)
      return metrics

    seconds, faults = measure(step, repeats)
    out = dict(ms=1e3 * seconds)
  print(json.dumps(dict(out, faults_per_call=faults)))


def _library(name):
  for folder in LIBS:
    path = os.path.join(folder, name)
    if os.path.exists(path):
      return path
  return None


def in_children(mode, mb, repeats):
  rows = []
  for name, env in ALLOCATORS.items():
    env = dict(env)
    if "LD_PRELOAD" in env:
      env["LD_PRELOAD"] = _library(env["LD_PRELOAD"])
      if env["LD_PRELOAD"] is None:
        print(f"  ({name} is not installed here: skipped)")
        continue
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.alloc_bench",
            f"--child={mode}",
            f"--mb={mb}",
            f"--repeats={repeats}",
        ],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        check=True,
    )
    rows.append(
        dict(allocator=name, **json.loads(proc.stdout.splitlines()[-1]))
    )
  base = rows[0]["ms"]
  for r in rows:
    r["speedup"] = base / r["ms"]
  return rows


def _table(rows):
  cols = list(rows[0])
  fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)
  lines = [" | ".join(cols)]
  lines += [" | ".join(fmt(r[c]) for c in cols) for r in rows]
  return "\n".join(lines)


def main(argv):
  del argv
  if _CHILD.value:
    child(_CHILD.value, _MB.value, _REPEATS.value)
    return
  gflops = (
      roofline_lib.rate(roofline_lib.make(), repeats=_REPEATS.value)[0] / 1e9
  )
  print(f"2048^2 float32 matmul: {gflops:.0f} GFLOP/s\n")
  print(f"{_MB.value} MB float32, this process (glibc malloc):")
  print(_table(in_process(_MB.value, _REPEATS.value)))
  print(f"\njax a*2+1 with a fresh output, {_MB.value} MB, by allocator:")
  print(_table(in_children("elementwise", _MB.value, _REPEATS.value)))
  for arg in (a for a in _STEPS.value if a != "none"):
    print(f"\nDyck training step, configs/dyck.py:{arg}, by allocator:")
    print(_table(in_children(f"step:{arg}", _MB.value, _REPEATS.value)))


if __name__ == "__main__":
  app.run(main)
