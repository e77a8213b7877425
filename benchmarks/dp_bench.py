r"""The fixed-size training step, data parallel over host CPU devices: a lead
for the issue's 0.65-of-roofline target, not what training runs yet.

  python -m benchmarks.dp_bench                          # 2 devices, YNNPACK off
  python -m benchmarks.dp_bench --devices=2 --ynn=default --microbatches=8
  python -m benchmarks.dp_bench --out=results/bench/dp   # also saved

Why: on 2 cores one process runs the step with both threads on every op, and
XLA's YNNPACK fusions run this step's small batched attention products and its
reduces over the batch axis slowly on 2 threads (a profile of the fixed step
had a 16 x 64 x 256 reduce at 3.5 ms a call). Here the process has --devices
CPU devices (`jax_num_cpu_devices`); each device takes 1/devices of the batch
(`jax.shard_map`), sums its gradients with `train.grad_sums` in --microbatches
parts, the sums are added across devices (`psum`), and `train.apply_gradients`
updates the replicated state. --ynn=off compiles the step with
xla_cpu_experimental_ynn_fusion_type empty (XLA's own kernels for every op);
default keeps XLA's choice.

Printed, medians of --repeats timed blocks of at least --min_block_s each,
interleaved in this one process:
  baseline  `train.train_step` as `train_and_evaluate` jits it (device 0,
            `default_microbatches`, XLA's defaults);
  dp        the data-parallel step;
  rooflines the 2048 x 2048 float32 `jnp.dot` on device 0, as train_bench
            measures it, and the same dot with its rows split over the devices.
--repeats, --min_block_s, --out and --overwrite are train_bench's flags.
Ratios: the step's analytic FLOP/s (train_bench's count) over each roofline. A
check that dp computes the same step as the baseline (loss, gradient norm
and parameters after one step, to float rounding) runs first; tests/bench_test.py runs it.

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
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import jax.numpy as jnp
import numpy as np

from benchmarks import train_bench
from ut import data as data_lib
from ut import reports
from ut import train
from ut.errors import UserError

_DEVICES = flags.DEFINE_integer("devices", 2, "Host CPU devices to split the "
                                "batch over (it must divide the batch, 256).")
_MICROBATCHES = flags.DEFINE_integer(
    "microbatches", 8, "Parts of each device's share of the batch.")
_YNN = flags.DEFINE_enum("ynn", "off", ["off", "default"],
                         "XLA's YNNPACK fusions in the data-parallel step.")
_SMALL = flags.DEFINE_bool("small", False, "A tiny config (tests): seconds.")
# --repeats, --min_block_s (per timed block), --out and --overwrite are
# train_bench's flags (imported with it); its --part and --mallopt are unused.
_REPEATS = train_bench._REPEATS  # pylint: disable=protected-access
_MIN_BLOCK_S = train_bench._MIN_BLOCK_S  # pylint: disable=protected-access
_OUT = train_bench._OUT  # pylint: disable=protected-access
_OVERWRITE = train_bench._OVERWRITE  # pylint: disable=protected-access


def dp_step(spec, tx, mesh, microbatches):
  """train_step with the batch split over `mesh`'s devices (see docstring)."""

  def local(params, batch):
    return jax.lax.psum(train.grad_sums(params, batch, spec=spec,
                                        microbatches=microbatches), "d")

  def step(state, batch):
    # check_vma=False: the custom VJPs of `ut.transformer` (batched_matmul)
    # do not annotate how their outputs vary across devices.
    (ce_sum, metrics), grads = jax.shard_map(
        local, mesh=mesh, in_specs=(P(), P("d")), out_specs=P(),
        check_vma=False)(state.params, batch)
    scale = 1.0 / jnp.maximum(metrics.pop("labelled"), 1)
    grads = jax.tree.map(lambda g: g * scale, grads)
    return train.apply_gradients(state, grads, dict(loss=ce_sum * scale,
                                                    **metrics), tx)
  return step


def _median_block(fn, seconds):
  """Per-call seconds of `fn` over a block of at least `seconds`."""
  start = time.perf_counter()
  calls = 0
  while calls == 0 or time.perf_counter() - start < seconds:
    jax.block_until_ready(fn())
    calls += 1
  return (time.perf_counter() - start) / calls


def main(argv):
  del argv
  devices = _DEVICES.value
  paths = [] if _OUT.value is None else [
      os.path.join(_OUT.value, f"dp_bench.{e}") for e in ("md", "json")]
  try:
    reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
    if devices < 1:
      raise UserError(f"--devices={devices} must be at least 1")
    jax.config.update("jax_num_cpu_devices", devices)
    if jax.default_backend() != "cpu":
      raise UserError("dp_bench splits a CPU's cores into devices; this "
                      f"backend is {jax.default_backend()}")
  except UserError as e:
    sys.exit(f"error: {e}")
  case = train_bench.FIXED
  config = case.config()
  if _SMALL.value:
    config.model.update(dict(m=32, head_width=8))
    config.data.max_len = 15
    config.train.batch_size = 8 * devices
  task = data_lib.make_task(config)
  spec = train.model_spec(config, task.info)
  host_batch = train.train_batch(config, task, 0)
  b, t = host_batch["tokens"].shape
  per_device = b // devices
  if b % devices or per_device % _MICROBATCHES.value:
    sys.exit(f"error: --devices={devices} x --microbatches="
             f"{_MICROBATCHES.value} must divide the batch size {b}")
  mesh = jax.make_mesh((devices,), ("d",))
  rows, replicated = NamedSharding(mesh, P("d")), NamedSharding(mesh, P())
  options = ({} if _YNN.value == "default" else dict(
      compiler_options=dict(xla_cpu_experimental_ynn_fusion_type="")))
  state, tx, _ = train.init_state(config, spec)
  dp = jax.jit(dp_step(spec, tx, mesh, _MICROBATCHES.value), donate_argnums=0,
               **options)
  base = jax.jit(functools.partial(train.train_step, spec=spec, tx=tx),
                 donate_argnums=0)

  # The check: one step each from the same state gives the same step.
  ref_state, ref_metrics = base(state, host_batch)
  dp_state, dp_metrics = dp(jax.device_put(train.init_state(config, spec)[0],
                                           replicated),
                            jax.device_put(host_batch, rows))
  errors = [float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
            for x, y in zip(jax.tree.leaves(ref_state.params),
                            jax.tree.leaves(dp_state.params))]
  loss_error = abs(float(ref_metrics["loss"]) - float(dp_metrics["loss"]))
  norm_error = abs(float(ref_metrics["grad_norm"]) / float(dp_metrics["grad_norm"])
                   - 1)
  same = max(errors) < 1e-5 and loss_error < 1e-5 and norm_error < 1e-5
  lines = []

  def say(line=""):
    print(line, flush=True)
    lines.append(line)

  say(f"[dp] jax {jax.__version__}, {os.cpu_count()} CPUs as {devices} "
      f"devices, {_MICROBATCHES.value} microbatches per device, YNNPACK "
      f"{_YNN.value} in dp; medians of {_REPEATS.value} blocks")
  say(f"  check: dp vs train_step after one step: loss differs by "
      f"{loss_error:.2e}, gradient norm by {norm_error:.2e} (relative), "
      f"parameters by at most {max(errors):.2e} "
      f"({'same step' if same else 'DIFFERENT'})")
  if not same:
    sys.exit("error: the data-parallel step does not match train_step")

  key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
  n = train_bench.ROOFLINE_N
  a = jax.random.normal(key_a, (n, n), jnp.float32)
  w = jax.random.normal(key_b, (n, n), jnp.float32)
  dot = jax.jit(jnp.dot)
  a_rows, w_all = jax.device_put(a, rows), jax.device_put(w, replicated)
  holders = dict(base=[ref_state, host_batch],
                 dp=[dp_state, jax.device_put(host_batch, rows)])

  def run(name, fn):
    st, batch = holders[name]
    st, metrics = fn(st, batch)
    holders[name][0] = st
    return metrics

  timed = dict(base=lambda: run("base", base), dp=lambda: run("dp", dp),
               dot=lambda: dot(a, w), dot_split=lambda: dot(a_rows, w_all))
  for fn in timed.values():  # Warm up (and compile).
    jax.block_until_ready(fn())
  times = {k: [] for k in timed}
  for _ in range(_REPEATS.value):
    for k, fn in timed.items():
      times[k].append(_median_block(fn, _MIN_BLOCK_S.value))
  med = {k: statistics.median(v) for k, v in times.items()}
  _, flops = train_bench.analytic_flops(spec, b, t)
  roof = {k: 2.0 * n**3 / med[k] for k in ("dot", "dot_split")}
  say()
  say(f"{'measurement':30s} {'ms/step':>8s} {'GFLOP/s':>8s} {'/dot':>6s} "
      f"{'/split dot':>10s}")
  results = {}
  for k, label in (("base", "baseline train_step"),
                   ("dp", f"dp over {devices} devices")):
    rate = flops / med[k]
    results[k] = dict(ms_per_step=1e3 * med[k], flops_per_s=rate,
                      ratio_dot=rate / roof["dot"],
                      ratio_split_dot=rate / roof["dot_split"])
    say(f"{label:30s} {1e3 * med[k]:8.1f} {rate / 1e9:8.1f} "
        f"{rate / roof['dot']:6.3f} {rate / roof['dot_split']:10.3f}")
  say(f"  rooflines: dot {roof['dot'] / 1e9:.1f} GFLOP/s, split dot "
      f"{roof['dot_split'] / 1e9:.1f} GFLOP/s; {flops / 1e9:.2f} GFLOP/step "
      f"({spec.kind}/{spec.variant} M={spec.model_width} T={t} B={b})")
  say(f"  dp runs {med['base'] / med['dp']:.2f}x the baseline's steps/s")
  if _OUT.value is not None:
    os.makedirs(_OUT.value, exist_ok=True)
    with open(paths[0], "w") as f:
      f.write("\n".join(lines) + "\n")
    reports.write_json(paths[1], dict(
        devices=devices, microbatches=_MICROBATCHES.value, ynn=_YNN.value,
        repeats=_REPEATS.value, rooflines=roof, check_loss_error=loss_error, check_grad_norm_error=norm_error,
        check_param_error=max(errors), results=results,
        provenance=reports.provenance()))
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
  app.run(main)
