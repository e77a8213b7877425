r"""The fixed-size training step, data parallel over host CPU devices, beside
the one-device step.

  python -m benchmarks.dp_bench                     # the fixed size, 2 devices
  python -m benchmarks.dp_bench --dp_part=configs      # the default configs
  python -m benchmarks.dp_bench --dp_part=all --out=results/bench/dp   # saved

Why: on 2 cores one process runs the step with both threads on every op, and
XLA splits small ops (the per-string attention products, softmax, the
transposes) over 2 threads poorly: the fixed step ran faster pinned to one
core than on two (an ad-hoc A/B, not saved). Here the process has --devices
CPU devices (`jax_num_cpu_devices`); each device takes 1/devices of the batch
(`step_lib.data_parallel_step`, what `launch.train --cpu_devices=D
--config.train.data_parallel=True` runs), sums its gradients in
`default_microbatches` parts of its share (or --microbatches), and the sums
are added across devices.

Printed, medians of --repeats timed blocks of at least --min_block_s each,
interleaved in this one process:
  baseline  `step_lib.train_step` as `train_and_evaluate` jits it by default
            (device 0, `default_microbatches`, XLA's defaults);
  dp        the data-parallel step, with XLA's defaults;
  dp -ynn   the same with config.cpu.ynn_fusions=False (configs/cpu.py)
            (`implementation.compiler_options`: no YNNPACK fusions, XLA's own kernels);
  rooflines the 2048 x 2048 float32 `jnp.dot` on device 0, as train_bench
            measures it, and the same dot with its rows split over the devices.
--repeats, --min_block_s, --out and --overwrite are train_bench's flags.
Ratios: the step's analytic FLOP/s (train_bench's count) over each roofline.
Cases: --dp_part=fixed is train_bench's fixed size (issue target 0.65 of the
roofline), --dp_part=configs train_bench's default configs, --dp_part=all
both. For
each, a check that both dp steps compute the step the baseline does (loss,
gradient norm and parameters after one step, to float rounding) runs first;
tests/bench_test.py runs it.

--out=DIR saves what is printed as DIR/dp_bench.md and the numbers as
DIR/dp_bench.json, with provenance; an existing report is kept unless
--overwrite is given.
"""

import functools
import os
import statistics
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from benchmarks import train_bench
from configs import cpu as cpu_config
from ut.errors import UserError
from ut.io import reports
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib

_DEVICES = flags.DEFINE_integer(
    "devices",
    2,
    "Host CPU devices to split the " "batch over (it must divide the batch).",
    lower_bound=1,
)
_MICROBATCHES = flags.DEFINE_integer(
    "microbatches",
    None,
    "Parts of each device's share of the batch "
    "(default: `implementation.microbatches` of the share, as training).",
)
_DP_PART = flags.DEFINE_enum(
    "dp_part",
    "fixed",
    ["fixed", "configs", "all"],
    "Which cases to measure (see the docstring).",
)
_SMALL = flags.DEFINE_bool("small", False, "A tiny fixed-size config (tests).")
# --repeats, --min_block_s (per timed block), --out and --overwrite are
# train_bench's flags (imported with it); its --part and --mallopt are unused.
_REPEATS = train_bench._REPEATS  # pylint: disable=protected-access
_MIN_BLOCK_S = train_bench._MIN_BLOCK_S  # pylint: disable=protected-access
_OUT = train_bench._OUT  # pylint: disable=protected-access
_OVERWRITE = train_bench._OVERWRITE  # pylint: disable=protected-access
STEPS = (
    ("base", "baseline train_step"),
    ("dp", "dp"),
    ("dp_no_ynn", "dp -ynn"),
)


def _block(fn, seconds):
  """Per-call seconds of `fn` over a block of at least `seconds`."""
  start = time.perf_counter()
  calls = 0
  while calls == 0 or time.perf_counter() - start < seconds:
    jax.block_until_ready(fn())
    calls += 1
  return (time.perf_counter() - start) / calls


def _check(ref, got):
  """(loss, relative grad norm, largest parameter) differences of two steps."""
  (ref_state, ref_metrics), (state, metrics) = ref, got
  params = max(
      float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
      for x, y in zip(
          jax.tree.leaves(ref_state.params), jax.tree.leaves(state.params)
      )
  )
  return (
      abs(float(ref_metrics["loss"]) - float(metrics["loss"])),
      abs(float(ref_metrics["grad_norm"]) / float(metrics["grad_norm"]) - 1),
      params,
  )


def bench_case(case, devices, microbatches, small=False):
  """Times the baseline and both data-parallel steps of one case; returns a
  dict of the checks, step times, rooflines and ratios."""
  config = case.config()
  if small:
    config.model.update(dict(m=32, head_width=8))
    config.data.max_len = 15
    config.train.batch_size = 8 * devices
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  host_batch = data_lib.train_batch(config, task, 0)
  b, t = host_batch["tokens"].shape
  if b % devices or (microbatches and (b // devices) % microbatches):
    raise UserError(
        f"--devices={devices} x --microbatches={microbatches} "
        f"must divide the batch size {b} ({case.name})"
    )
  mesh = jax.make_mesh((devices,), ("batch",))
  rows, copies = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
  state, tx, _ = checkpoint.init_state(config, spec)
  steps = dict(base=step_lib.make_step(config, spec, tx)[0])
  for name, ynn in (("dp", True), ("dp_no_ynn", False)):
    config.train.data_parallel = True
    cpu_config.overlay(config).cpu.ynn_fusions = ynn
    steps[name] = jax.jit(
        step_lib.data_parallel_step(spec, tx, mesh, microbatches),
        donate_argnums=0,
        **implementation.compiler_options(config),
    )
  batches = dict(base=host_batch)
  batches.update(
      {k: jax.device_put(host_batch, rows) for k in steps if k != "base"}
  )
  fresh = lambda k: (
      state
      if k == "base"
      else jax.device_put(checkpoint.init_state(config, spec)[0], copies)
  )
  firsts = {k: steps[k](fresh(k), batches[k]) for k in steps}
  checks = {k: _check(firsts["base"], firsts[k]) for k in steps if k != "base"}
  states = {k: firsts[k][0] for k in steps}

  def run(k):
    states[k], metrics = steps[k](states[k], batches[k])
    return metrics

  key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
  n = train_bench.ROOFLINE_N
  a = jax.random.normal(key_a, (n, n), jnp.float32)
  w = jax.random.normal(key_b, (n, n), jnp.float32)
  dot = jax.jit(jnp.dot)
  a_rows, w_all = jax.device_put(a, rows), jax.device_put(w, copies)
  timed = {k: functools.partial(run, k) for k in steps}
  timed.update(dot=lambda: dot(a, w), dot_split=lambda: dot(a_rows, w_all))
  for fn in timed.values():  # Warm up (and compile).
    jax.block_until_ready(fn())
  times = {k: [] for k in timed}
  for _ in range(_REPEATS.value):
    for k, fn in timed.items():
      times[k].append(_block(fn, _MIN_BLOCK_S.value))
  med = {k: statistics.median(v) for k, v in times.items()}
  _, flops = train_bench.analytic_flops(spec, b, t)
  roof = {k: 2.0 * n**3 / med[k] for k in ("dot", "dot_split")}
  return dict(
      name=case.name + (" (--small: m32 k8 n16)" if small else ""),
      flops=flops,
      rooflines=roof,
      shape=f"{spec.kind}/{spec.variant} M={spec.model_width} T={t} B={b}",
      checks={
          k: dict(zip(("loss", "grad_norm", "params"), v))
          for k, v in checks.items()
      },
      worst_check=max(max(v) for v in checks.values()),
      steps={
          k: dict(
              ms_per_step=1e3 * med[k],
              flops_per_s=flops / med[k],
              ratio_dot=flops / med[k] / roof["dot"],
              ratio_split_dot=flops / med[k] / roof["dot_split"],
              speedup=med["base"] / med[k],
          )
          for k in steps
      },
  )


def main(argv):
  del argv
  devices = _DEVICES.value
  paths = (
      []
      if _OUT.value is None
      else [os.path.join(_OUT.value, f"dp_bench.{e}") for e in ("md", "json")]
  )
  lines = []

  def say(line=""):
    print(line, flush=True)
    lines.append(line)

  cases = (
      [train_bench.FIXED] if _DP_PART.value in ("fixed", "all") else []
  ) + (
      list(train_bench.CONFIGS) if _DP_PART.value in ("configs", "all") else []
  )
  results = []
  try:
    if paths:
      reports.check_folder(_OUT.value, "--out")
    reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
    if devices < 1:
      raise UserError(f"--devices={devices} must be at least 1")
    jax.config.update("jax_num_cpu_devices", devices)
    if jax.default_backend() != "cpu":
      raise UserError(
          "dp_bench splits a CPU's cores into devices; this "
          f"backend is {jax.default_backend()}"
      )
    say(
        f"[dp] jax {jax.__version__}, {os.cpu_count()} CPUs as {devices} "
        f"devices; medians of {_REPEATS.value} blocks of >= "
        f"{_MIN_BLOCK_S.value} s"
    )
    for case in cases:
      results.append(
          bench_case(case, devices, _MICROBATCHES.value, _SMALL.value)
      )
      if results[-1]["worst_check"] > 1e-5:
        raise UserError(
            f"{case.name}: a data-parallel step differs from "
            f"train_step by {results[-1]['worst_check']:.2e} "
            "after one step"
        )
      print(f"  {case.name}: done", flush=True)
  except UserError as e:
    sys.exit(f"error: {e}")
  say()
  say(
      f"{'measurement':42s} {'step':19s} {'ms/step':>8s} {'speedup':>7s} "
      f"{'/dot':>6s} {'/split dot':>10s}"
  )
  for r in results:
    for k, label in STEPS:
      st = r["steps"][k]
      say(
          f"{r['name'] if k == 'base' else '':42s} {label:19s} "
          f"{st['ms_per_step']:8.1f} {st['speedup']:7.2f} "
          f"{st['ratio_dot']:6.3f} {st['ratio_split_dot']:10.3f}"
      )
  say()
  for r in results:
    say(
        f"  {r['name']}: {r['shape']}, {r['flops'] / 1e9:.3f} GFLOP/step; "
        f"rooflines {r['rooflines']['dot'] / 1e9:.0f} and "
        f"{r['rooflines']['dot_split'] / 1e9:.0f} GFLOP/s; dp steps match "
        f"train_step to {r['worst_check']:.1e}"
    )
  for r in results:
    if r["name"] == train_bench.FIXED.name and not _SMALL.value:
      best = max(r["steps"].values(), key=lambda st: st["ratio_dot"])
      verdict = (
          "meets" if best["ratio_dot"] >= train_bench.TARGET_RATIO else "misses"
      )
      say(
          f"\n  fixed size, best step: {best['ratio_dot']:.3f} of the dot "
          f"roofline ({best['ratio_split_dot']:.3f} of the split dot): "
          f"{verdict} the issue's target of {train_bench.TARGET_RATIO}"
      )
  if _OUT.value is not None:
    os.makedirs(_OUT.value, exist_ok=True)
    with open(paths[0], "w") as f:
      f.write("\n".join(lines) + "\n")
    reports.write_json(
        paths[1],
        dict(
            devices=devices,
            microbatches=_MICROBATCHES.value,
            repeats=_REPEATS.value,
            min_block_s=_MIN_BLOCK_S.value,
            cases=results,
            provenance=reports.provenance(),
        ),
    )
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
  app.run(main)
