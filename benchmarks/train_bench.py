r"""Training-step throughput against a matmul roofline; prints medians and ratios.

  python -m benchmarks.train_bench                  # everything (< 4 min on 2 CPUs)
  python -m benchmarks.train_bench --part=fixed     # the fixed-size step only
  python -m benchmarks.train_bench --part=configs   # the default training configs
  python -m benchmarks.train_bench --part=microbatches  # sparse: parts vs whole
  python -m benchmarks.train_bench --mallopt        # glibc keeps XLA's temp buffer
  python -m benchmarks.train_bench --part=fixed --out=results/bench  # also saved

--out=DIR saves what is printed as DIR/train_bench.md and the measurements as
DIR/train_bench.json, with provenance (git commit, device, flags, load); an
existing report is kept unless --overwrite is given.

roofline  `jnp.dot` of two 2048 x 2048 float32 matrices, jitted: 2 * 2048^3 FLOPs
          over the median time. It is measured once on its own, and again inside
          every measurement (before each timed repeat, after an untimed dot: a
          step can leave the allocator cold), so that a step and the roofline it
          is divided by see the same load from other processes.
fixed     `ut.training.step.train_step`, jitted as in `train_and_evaluate` (donate_argnums=0,
          the optimizer of `make_optimizer`, `default_microbatches`: 16 of
          1024 tokens here; each case's count is printed under the table), for
          the size the issue fixes: a random UT, attention only, m=256, H=2,
          L=2, k_u=32 (configs/common.py), n=64 tokens, batch 256. Its tokens
          come from configs/dyck.py:model=random,max_len=63 (63 brackets and
          the '?' query: 64 tokens, vocabulary 4, 2 classes). Issue target:
          >= 0.65 of roofline.
configs   the same step for the default configs at their own batch size and
          length (printed under the table): configs/dyck.py:model=sparse|random|
          trained,variant=attn|res_ln|res_ln_mlp and
          configs/khop.py:model=sparse,variant=res_ln,k=1|2.
microbatches  the sparse UT's largest default configs (k-hop k = 4 with res_ln
          and res_ln_mlp, Dyck with res_ln_mlp) with `default_microbatches`,
          side by side with the same step on the whole batch; prints the ratio.

A timed repeat runs whole steps for at least --min_block_s on one batch already
on the device, and waits for each step's metrics, as the training loop does when
it reads the loss (host data generation is not timed). Steps/s is the median
over repeats. sys% is the share of the step's CPU time spent in the kernel:
with glibc's defaults XLA's per-step temp buffer (194 MiB at the fixed size
without microbatches) is allocated on a worker thread's arena, so it is mmap'd,
page-faulted in and unmapped on every step. --mallopt (before JAX starts:
M_ARENA_MAX=1, M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB, as launch/cli.py does for
real training) keeps it in the main heap instead.

FLOP counts of one step, two ways:
  xla       `jax.jit(step).lower(...).compile().cost_analysis()['flops']`: what
            the compiled step computes, elementwise ops and unneeded work included
            (of the step with microbatches=1: XLA counts a loop body once).
  analytic  the matmul FLOPs of the model as `ut.training.models` computes it (a
            multiply-add is 2 FLOPs). B batch, T tokens, M model width, H heads,
            L layers, K head width (k_u for a random UT), d virtual target width
            and F_j level widths (sparse), V vocabulary, C classes,
            F = spec.mlp_hidden_width. Forward:
      embedding  2BTVM (a one-hot matmul; the position table is an add)
      per layer, random   (an attention-only random UT whose coefficient
                          form applies, `ut.cpu.coefficients.coefficient_form`,
                          the fixed size's among them: `coefficient_flops`)
                          H [2*2BTMK (Z R_Q, Z R_K) + 2BTTK (Q K^T)
                             + 2BTMM (Z R_V) + 2BTTM (A (Z R_V))], except
                          that layer 1 works from the tables
                          (`ut.cpu.forward._random_first_layer`): in place of
                          H 2BTMM, H [2(V+T)MM (E_tok R_V, E_pos R_V)
                          + 2BTTV' (A onehot) + 2BTV'M (its product with
                          E_tok R_V)], V' = V, or V + 1 with a LayerNorm
                          (the mean column)
                 trained  H [2*2BTMK + 2BTTK + 2BTMK (Z W_V) + 2BTTK (A V)
                             + 2BTKM (W_O)]
                 sparse   H 2BTTd (Q K^T) + sum_j 2BTT W_j over the levels j >= 1,
                          W_j the width level j holds: F_j with a residual;
                          without one, layer l = 1..L moves level j+1 into
                          level j, H^j d wide for the level that came from the
                          leaves (state role only), and the levels deeper than
                          L - l + 1 are known zeros and skipped
                          (`sparse.route_levels`)
                 res_ln_mlp adds 2*2BTMF
      unembedding 2BTMC (sparse attn: only level 0, d wide, is left)
            Backward: a matmul needs the gradient of its activation input (E is
            trainable and lies below every layer, so every activation has one)
            and of its weight only where the weight trains. So a matmul with a
            frozen weight (R_Q, R_K, R_V, a UT's MLP) or a constant input (the
            one-hot) costs 1x its forward; a matmul of two activations (Q K^T,
            A V, routing), the unembedding and every matmul of `trained` 2x.
            Softmax, LayerNorm, masks, loss and the AdamW update are
            O(BHT^2 + BTM + #params) elementwise work and not counted.
            Fixed size: 9.01 GFLOP forward, 20.52 GFLOP per step (28.84 with
            layer 1 computed as the others: the dense UT of DESIGN §1).
ratio = achieved FLOP/s / roofline FLOP/s (medians; the roofline measured
alongside that step).
"""

import ctypes
import dataclasses
import functools
import math
import os
import resource
import statistics
import sys
import time

from absl import app
from absl import flags
import jax

from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.core.constructions import sparse
from ut.cpu import coefficients as cpu_coefficients
from ut.cpu import forward as cpu_forward
from ut.errors import UserError
from ut.io import reports
from ut.io import roofline as roofline_lib
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib

_PART = flags.DEFINE_enum(
    "part",
    "all",
    ["all", "fixed", "configs", "microbatches"],
    "Which measurements to run.",
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 7, "Timed repeats (median reported).", lower_bound=1
)
_MIN_BLOCK_S = flags.DEFINE_float(
    "min_block_s",
    0.25,
    "Each timed repeat runs whole steps for at least this "
    "many seconds (small steps run several per repeat).",
)
_OUT = flags.DEFINE_string(
    "out", None, "Folder to save the report in (<benchmark>.md and .json)."
)
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an existing report in --out."
)
_MALLOPT = flags.DEFINE_bool(
    "mallopt",
    False,
    "Before JAX starts, make glibc keep freed memory in its "
    "main heap, so that XLA's temp buffer is not page-faulted in every step.",
)

ROOFLINE_N = roofline_lib.N
TARGET_RATIO = 0.65
CONFIG_FILES = {"dyck": dyck_config, "khop": khop_config}


@dataclasses.dataclass(frozen=True)
class Case:
  """One measurement: a config file, its argument, and fields set on top."""

  name: str
  config_file: str
  arg: str
  batch_size: int | None = None
  model: tuple = ()  # (field, value) pairs for config.model.
  microbatches: int | None = None  # None: `implementation.microbatches`.

  def config(self):
    config = CONFIG_FILES[self.config_file].get_config(self.arg)
    if self.batch_size is not None:
      config.train.batch_size = self.batch_size
    config.model.update(dict(self.model))
    return config


# Pinned, so that a change of the configs' defaults does not move the target.
FIXED = Case(
    "fixed: random attn m256 H2 L2 n64 B256",
    "dyck",
    "model=random,variant=attn,max_len=63",
    batch_size=256,
    model=(
        ("m", 256),
        ("num_heads", 2),
        ("num_layers", 2),
        ("head_width", 32),
        ("shared", False),
    ),
)
CONFIGS = tuple(
    Case(
        f"dyck.py:model={kind},variant={variant}",
        "dyck",
        f"model={kind},variant={variant}",
    )
    for kind in ("sparse", "random", "trained")
    for variant in ("attn", "res_ln", "res_ln_mlp")
) + tuple(
    Case(
        f"khop.py:model=sparse,variant=res_ln,k={k}",
        "khop",
        f"model=sparse,variant=res_ln,k={k}",
    )
    for k in (1, 2)
)
# The sparse UT's largest default configs, for --part=microbatches.
MICROBATCH_CASES = tuple(
    Case(
        f"khop.py:model=sparse,variant={v},k=4",
        "khop",
        f"model=sparse,variant={v},k=4",
    )
    for v in ("res_ln", "res_ln_mlp")
) + (
    Case(
        "dyck.py:model=sparse,variant=res_ln_mlp",
        "dyck",
        "model=sparse,variant=res_ln_mlp",
    ),
)


@dataclasses.dataclass(frozen=True)
class Result:
  name: str
  steps_per_s: float
  xla_flops: float
  analytic_flops: float
  roofline: float  # FLOP/s of the 2048^2 dot, measured alongside.
  sys_share: float  # Kernel share of the step's CPU time.
  shape: str

  @property
  def xla_rate(self):
    return self.xla_flops * self.steps_per_s

  @property
  def analytic_rate(self):
    return self.analytic_flops * self.steps_per_s


def coefficient_flops(spec, batch_size, num_tokens):
  """(once, twice): the matmul FLOPs of the attention-only random UT's
  coefficient form (`ut.cpu.coefficients._random_attn_coefficients`), every
  position's logits, split by backward cost (once: one operand frozen or
  constant; twice: both move). P = (T + V) H^l is the coefficient width
  entering layer l >= 1 (layer 1's tables are the T + V rows of E):
    layer 1    queries, keys from tables: per head 2 (V + T) M K (tables) +
               2 B T V K (one-hot rows); scores 2 B T T K; A one-hot 2 B T T V
    layer l>1  R wq, R wk: 2 P M K H each (once); lhs (R w): 2 B T P K H each
               (twice); scores; A lhs: 2 B T T P H (twice)
    between    next tables [R wv_h]_h: 2 P M M H (once; P = T + V after
               layer 1)
    last       wv U: 2 H M M C (once); R (wv U): 2 P M H C (twice); the
               logits 2 B T H P C (twice)."""
  b, t, m, h = batch_size, num_tokens, spec.model_width, spec.num_heads
  k, c, v = spec.head_width, spec.num_classes, spec.vocab_size
  once = twice = 0.0
  p = t + v  # Rows of the tables (what lhs mixes).
  for layer in range(spec.num_layers):
    if layer == 0:
      once += 2 * h * (2 * (v + t) * m * k + 2 * b * t * v * k)
      once += h * 2 * b * t * t * v
    else:
      once += 2 * 2 * p * m * k * h
      twice += 2 * 2 * b * t * p * k * h + h * 2 * b * t * t * p
    twice += h * 2 * b * t * t * k
    if layer < spec.num_layers - 1:
      once += 2 * p * m * m * h
      p *= h
    else:
      once += 2 * h * m * m * c
      twice += 2 * p * m * h * c + 2 * b * t * h * p * c
  return once, twice


def residual_flops(spec, batch_size, num_tokens):
  """(once, twice): the matmul FLOPs of the random UT's coefficient form
  with res_ln (`ut.cpu.coefficients._random_residual_coefficients`), every
  position's logits, split by backward cost: once, its tables Rc wq, Rc wk,
  Rc wv (2 P M (2 K + M) H a layer, a frozen operand); twice, the rest of
  `ut.cpu.coefficients.residual_costs`' count (the Gram matrices, the
  coefficients' matmuls, the last state) and the unembedding."""
  m, h, k = spec.model_width, spec.num_heads, spec.head_width
  once = sum(
      2 * p * m * (2 * k + m) * h
      for p in cpu_coefficients.residual_coefficient_widths(spec, num_tokens)
  )
  coefficient, _, _ = cpu_coefficients.residual_costs(
      spec, batch_size, num_tokens
  )
  unembed = 2 * batch_size * num_tokens * m * spec.num_classes
  return once, 2 * coefficient - once + unembed


def analytic_flops(spec, batch_size, num_tokens):
  """(forward, step) matmul FLOPs of `train_step`: the module docstring's
  formula, for the full forward (every position's logits; a spec with
  last_only, Dyck's, computes less in its last layer); for an attention-only
  random UT that `ut.cpu.coefficients.coefficient_form` admits (on CPU),
  `coefficient_flops`; for a random UT with res_ln that
  `ut.cpu.coefficients.residual_coefficient_form` admits, `residual_flops`."""
  if implementation.resolve_impl(spec.impl) == "xla_cpu" and (
      cpu_forward.coefficient_form(spec, num_tokens)
  ):
    once, twice = coefficient_flops(spec, batch_size, num_tokens)
    forward = once + twice
    return forward, forward + once + 2 * twice
  if implementation.resolve_impl(spec.impl) == "xla_cpu" and (
      cpu_forward.residual_coefficient_form(spec, batch_size, num_tokens)
  ):
    once, twice = residual_flops(spec, batch_size, num_tokens)
    forward = once + twice
    return forward, forward + once + 2 * twice
  b, t, m, h = batch_size, num_tokens, spec.model_width, spec.num_heads
  k, c, num_layers = spec.head_width, spec.num_classes, spec.num_layers
  once = 2 * b * t * spec.vocab_size * m  # Backward 1x forward (embedding).
  twice = 0.0  # Backward 2x forward.
  out_width = m
  if spec.kind == "sparse":  # What each level holds (None: known zero).
    held = [s.stop - s.start for s in sparse.level_slices(spec.sparse_ut)]
  for layer in range(num_layers):
    if spec.kind == "random":
      once += h * 2 * 2 * b * t * m * k
      twice += h * (2 * b * t * t * k + 2 * b * t * t * m)
      if layer == 0:  # `ut.cpu.forward._random_first_layer`.
        v, ln = spec.vocab_size, spec.variant != "attn"
        once += h * (2 * (v + t) * m * m + 2 * b * t * t * v)
        twice += h * (2 * b * t * (v + ln) * m + ln * 2 * b * t * t)
      else:
        once += h * 2 * b * t * m * m
    elif spec.kind == "trained":
      twice += h * (
          2 * 2 * b * t * m * k
          + 2 * b * t * t * k
          + 2 * b * t * m * k
          + 2 * b * t * t * k
          + 2 * b * t * k * m
      )
    else:  # sparse: levels 1.. route what they hold (`sparse.route_levels`)
      twice += h * 2 * b * t * t * spec.width + sum(
          2 * b * t * t * f for f in held[1:] if f
      )
      if not spec.residual:  # Level j gets level j+1's strings, 1/H as many;
        held = [f and f // h for f in held[1:]] + [None]  # the leaves none.
        out_width = sum(f for f in held if f)
    if spec.variant == "res_ln_mlp":
      mlp = 2 * 2 * b * t * m * spec.mlp_hidden_width
      if spec.kind == "trained":
        twice += mlp
      else:
        once += mlp
  twice += 2 * b * t * out_width * c  # Unembedding (trainable).
  forward = once + twice
  return forward, forward + once + 2 * twice


def xla_flops(compiled):
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # Older jax: one dict per computation.
    cost = cost[0]
  return float(cost["flops"])


def _cpu_seconds():
  """(user, system) CPU seconds of this process so far."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime, usage.ru_stime


def keep_heap():
  """glibc: one arena, no mmap'd chunks, no trimming (must run before JAX starts)."""
  libc = ctypes.CDLL("libc.so.6")
  m_trim_threshold, m_mmap_max, m_arena_max = -1, -4, -8
  ok = (
      libc.mallopt(m_arena_max, 1)
      and libc.mallopt(m_mmap_max, 0)
      and libc.mallopt(m_trim_threshold, 2**30)
  )
  if not ok:
    raise RuntimeError("mallopt failed")


def bench_step(case, roofline, repeats, min_block_s):
  """Times `step_lib.train_step` for one case; returns a Result."""
  config = case.config()
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  state, tx, _ = checkpoint.init_state(config, spec)
  batch = jax.device_put(data_lib.train_batch(config, task, 0))
  b, t = batch["tokens"].shape
  microbatches = case.microbatches or implementation.microbatches(b, t, spec)
  step = jax.jit(
      functools.partial(
          step_lib.train_step, spec=spec, tx=tx, microbatches=microbatches
      ),
      donate_argnums=0,
  )
  compiled = step.lower(state, batch).compile()
  holder = [state]

  def run(num_steps):
    state = holder[0]
    for _ in range(num_steps):
      state, metrics = compiled(state, batch)
      jax.block_until_ready(metrics)
    holder[0] = state
    return state

  roofline_lib.seconds(lambda: run(2))  # Warm up.
  per_step = roofline_lib.seconds(lambda: run(1))
  num_steps = max(1, math.ceil(min_block_s / per_step))
  roof_fn, roof_flops = roofline
  rates, roof_secs, user, system = [], [], 0.0, 0.0
  for _ in range(repeats):
    # Once untimed: the step may leave the allocator cold.
    roofline_lib.seconds(roof_fn)
    roof_secs.append(roofline_lib.seconds(roof_fn))
    user_0, system_0 = _cpu_seconds()
    rates.append(num_steps / roofline_lib.seconds(lambda: run(num_steps)))
    user_1, system_1 = _cpu_seconds()
    user, system = user + user_1 - user_0, system + system_1 - system_0
  _, analytic = analytic_flops(spec, b, t)
  whole = jax.jit(
      functools.partial(step_lib.train_step, spec=spec, tx=tx, microbatches=1)
  )
  shape = (
      f"{spec.kind}/{spec.variant} M={spec.model_width} H={spec.num_heads} "
      f"L={spec.num_layers} T={t} B={b} "
      f"microbatches={microbatches}"
  )
  return Result(
      case.name,
      statistics.median(rates),
      xla_flops(whole.lower(holder[0], batch).compile()),
      analytic,
      roof_flops / statistics.median(roof_secs),
      system / max(user + system, 1e-9),
      shape,
  )


def table_lines(results):
  """The results table, then each case's shape, as lines of text."""
  header = (
      f"{'measurement':42s} {'steps/s':>8s} {'ms/step':>8s} "
      f"{'GF/step':>7s} {'GF/step':>7s} {'GFLOP/s':>8s} {'GFLOP/s':>8s} "
      f"{'roofline':>8s} {'ratio':>6s} {'ratio':>6s} {'sys%':>5s}"
  )
  units = (
      f"{'':42s} {'':>8s} {'':>8s} {'xla':>7s} {'anlytc':>7s} {'xla':>8s} "
      f"{'anlytc':>8s} {'GFLOP/s':>8s} {'xla':>6s} {'anlytc':>6s} {'':>5s}"
  )
  lines = [header, units, "-" * len(header)]
  for r in results:
    lines.append(
        f"{r.name:42s} {r.steps_per_s:8.2f} {1e3 / r.steps_per_s:8.2f} "
        f"{r.xla_flops / 1e9:7.3f} {r.analytic_flops / 1e9:7.3f} "
        f"{r.xla_rate / 1e9:8.2f} {r.analytic_rate / 1e9:8.2f} "
        f"{r.roofline / 1e9:8.1f} {r.xla_rate / r.roofline:6.3f} "
        f"{r.analytic_rate / r.roofline:6.3f} {100 * r.sys_share:5.1f}"
    )
  lines.append("")
  lines += [f"  {r.name}: {r.shape}" for r in results]
  return lines


def main(argv):
  del argv
  if _MALLOPT.value:
    keep_heap()
  out = _OUT.value
  paths = (
      []
      if out is None
      else [os.path.join(out, f"train_bench.{ext}") for ext in ("md", "json")]
  )
  try:
    if paths:
      reports.check_folder(out, "--out")
    reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
  except UserError as e:
    sys.exit(f"error: {e}")
  lines = []

  def say(line=""):
    print(line, flush=True)
    lines.append(line)

  repeats, part = _REPEATS.value, _PART.value
  start = time.perf_counter()
  cpus = os.cpu_count()
  load = os.getloadavg()[0]
  say(
      f"[train] jax {jax.__version__} on {jax.devices()[0].platform} "
      f"({cpus} CPUs, 1-min load average {load:.1f}); medians of {repeats}"
      f"{'; --mallopt' if _MALLOPT.value else ''}"
  )
  if load > 0.5 * cpus:
    say(
        "  note: other processes share the CPUs; each ratio divides by a "
        "roofline measured alongside its step, but the dot loses more to "
        "them than a step does, so ratios read higher than on a quiet machine"
    )
  roofline = roofline_lib.make()
  rate, secs = roofline_lib.rate(roofline, repeats)
  say(
      f"  roofline: jnp.dot {ROOFLINE_N}x{ROOFLINE_N} float32, {secs * 1e3:.1f} ms,"
      f" {rate / 1e9:.1f} GFLOP/s"
  )
  cases = ([FIXED] if part in ("all", "fixed") else []) + (
      list(CONFIGS) if part in ("all", "configs") else []
  )
  if part == "microbatches":  # Each case by default, then in one whole batch.
    cases = [
        c
        for case in MICROBATCH_CASES
        for c in (
            case,
            dataclasses.replace(
                case, name=case.name + " whole", microbatches=1
            ),
        )
    ]
  results = [
      bench_step(case, roofline, repeats, _MIN_BLOCK_S.value) for case in cases
  ]
  say()
  for line in table_lines(results):
    say(line)
  for r in results:
    if r.name == FIXED.name:
      verdict = (
          "meets" if r.analytic_rate / r.roofline >= TARGET_RATIO else "misses"
      )
      say(
          f"\n  fixed size {verdict} the issue's target of {TARGET_RATIO} x "
          f"roofline on the analytic count: {r.analytic_rate / r.roofline:.3f}"
          f" ({r.xla_rate / r.roofline:.3f} on XLA's count, which is "
          f"{(r.xla_flops - r.analytic_flops) / 1e9:.2f} GFLOP/step higher: "
          f"elementwise work and work the step need not do)"
      )
      if jax.device_count() == 1 and (os.cpu_count() or 1) > 1:
        say(
            "  (one device; `python -m benchmarks.dp_bench` measures the same "
            "step data parallel over one device per core, as `launch.train "
            "--cpu_devices=N` runs it)"
        )
  if part == "microbatches":
    say()
    for default, whole in zip(results[::2], results[1::2]):
      # Each against the roofline measured beside it: the two are timed one
      # after the other, and the machine's speed drifts in between.
      ratio = (default.steps_per_s / default.roofline) / (
          whole.steps_per_s / whole.roofline
      )
      say(
          f"  {default.name}: default microbatches run {ratio:.2f}x the steps/s "
          "of the whole batch (each over its own roofline)"
      )
  say(f"  total {time.perf_counter() - start:.0f}s")
  if out is not None:
    os.makedirs(out, exist_ok=True)
    with open(paths[0], "w") as f:
      f.write("\n".join(lines) + "\n")
    reports.write_json(
        paths[1],
        dict(
            roofline_flops_per_s=rate,
            load_average_1min=load,
            cpus=cpus,
            repeats=repeats,
            part=part,
            mallopt=_MALLOPT.value,
            results=[
                dict(
                    dataclasses.asdict(r),
                    ratio_analytic=r.analytic_rate / r.roofline,
                    ratio_xla=r.xla_rate / r.roofline,
                )
                for r in results
            ],
            provenance=reports.provenance(),
        ),
    )
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
  app.run(main)
