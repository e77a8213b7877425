r"""The training step on one accelerator: one prepared script for a GPU slot.

  python -m benchmarks.gpu_bench --out=results/bench/gpu_bench.md
  python -m benchmarks.gpu_bench --cases=za,trained --budget_s=120
  python -m benchmarks.gpu_bench --smoke --out=/tmp/g.md   # CPU, tiny sizes

Cases, the costliest first (`--cases`, comma-separated, or `all`):
  width       configs/width.py:cell=khop2 at m = 2N (the width sweep's own
              rule for ratio 2; N = 2528): the random UT with res_ln, k = 2.
  learnability  the random UT of configs/learnability.py: the k = 2 target
              (d = 64, H = 2, L = 3) compiled at m = ceil(1.25 N) = 2880,
              k_u = d, attention only, in `ut.experiments.learnability`'s
              UT protocol (`ut_config`).
  khop        configs/khop.py:model=random,variant=attn,k=2.
  dyck        configs/dyck.py:model=random (attention only).
  za          Zhong & Andreas's size: configs/dyck.py:model=random,
              variant=res_ln_mlp,max_len=60 with m = 16, 4 heads of width 4,
              mlp_ratio 4, batch 1000 (as benchmarks/peer_bench.py's `za`).
  trained     configs/khop.py:model=trained,variant=res_ln_mlp,k=2.
--smoke takes each config's `smoke` argument (tiny sizes, for a CPU test),
compiles at XLA's optimization level 0 (compiles dominate there), and times
2 rounds of single steps unless --rounds and --min_block_s say otherwise.

Cells of a case: impl (`ModelSpec.impl`: reference, xla_cpu) x precision
(`jax.default_matmul_precision` around tracing: highest, tensorfloat32; on a
CPU both are full float32) x seeds (--seeds: 1, 3, 8). One seed is `step_lib.train_step`
jitted as `step_lib.make_step` jits it (donate_argnums=0, the frozen layers
split by `implementation.split_frozen` where the model reads them so); 3 and 8 seeds
are the sweep's vmapped group step (`ut.experiments.sweep._train_group`:
`jax.vmap` of `train_step` over stacked states and batches, the runs
differing in seed and model.ut_seed as `sweep.BATCHED_KEYS` allows).

Columns:
  compile s   `jit(...).lower(...).compile()` wall seconds, tracing
              included (the benchmark turns on no compilation cache).
  ms/step     median over interleaved rounds: each round runs a block of
              steps of every cell in turn (the order rotating), so that drift
              hits every cell alike; a block runs at least --min_block_s and
              waits for the state and metrics (`jax.block_until_ready`).
  ms/run      ms/step over seeds: one run's share of a vmapped step.
  GFLOP/s     XLA's cost analysis of the compiled step (`flops`) over
              ms/step; where the step runs in microbatches (on CPU: a
              lax.scan, whose body XLA counts once), of the same step on
              the whole batch, lowered only (not compiled).
  XLA MiB     the compiled step's arguments + outputs + temporaries - aliased
              (`memory_analysis()`), this cell's own.
  peak MiB    the device's `peak_bytes_in_use` after the cell's first steps:
              the process's peak so far, not the cell's (n/a on CPU).
  grad diff   max |g - g_ref| over the trainable leaves of the mean-loss
              gradient (`step_lib.grad_sums` over the labelled count) at the
              initial parameters and batch of seed 0, g_ref from impl
              reference at precision highest (one-seed rows).

--budget_s (default 420: the whole script in about 8 minutes on one
H100/H200) is respected by running cases costliest first and skipping, and
recording as skipped, a case or cell that no longer fits (a case with less
than MIN_CASE_S left, a cell with less than twice its case's slowest compile
so far), and by ending a case's timed rounds early. A case or cell that
fails is recorded with its error in one line, and the rest go on. The report (--out, .md, and the same stem
.json) is rewritten after every cell and round, so that a killed run leaves
what it measured; an existing report is kept unless --overwrite.
"""

import dataclasses
import datetime
import functools
import math
import os
import statistics
import sys
import time
import types

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from configs import learnability as learnability_config
from configs import width as width_config
from ut.core import bounds
from ut.errors import UserError
from ut.experiments import learnability as learnability_lib
from ut.io import reports
from ut.io import roofline as roofline_lib
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import loop
from ut.training import models
from ut.training import step as step_lib


def define_flags():
  """The command's flags; defined only when it runs as a program, so that
  importing this module (its test does) defines none: other benchmarks
  define flags of the same names."""
  flags.DEFINE_string("out", None, "The report (.md; .json beside it).")
  flags.DEFINE_bool("overwrite", False, "Replace a saved report.")
  flags.DEFINE_bool("smoke", False, "Each config's smoke size.")
  flags.DEFINE_string("cases", "all", "Comma-separated cases, or 'all'.")
  flags.DEFINE_float(
      "budget_s",
      420.0,
      "Wall seconds for everything; what does not fit is "
      "skipped and recorded as skipped.",
  )
  flags.DEFINE_integer(
      "rounds", None, "Interleaved timed rounds (default 5; 2 with --smoke)."
  )
  flags.DEFINE_list(
      "seeds",
      ["1", "3", "8"],
      "Runs per step, one cell each: 1 is one run's step, more the sweep's "
      "vmapped group step.",
  )
  flags.DEFINE_float(
      "min_block_s",
      None,
      "Least seconds of a timed block (default 0.05; 0 "
      "with --smoke: one step).",
  )


IMPLS = ("reference", "xla_cpu")
PRECISIONS = ("highest", "tensorfloat32")
SEEDS = (1, 3, 8)
REFERENCE = ("reference", "highest")
MIN_CASE_S = 15.0  # A case is not started with less left.
SMOKE_OPTIONS = dict(
    xla_backend_optimization_level=0, xla_llvm_disable_expensive_passes=True
)


def _sweep_config(module, arg):
  """The config of the one run `module.sweep(add, arg)` plans."""
  runs = []
  module.sweep(lambda run, **overrides: runs.append((run, overrides)), arg)
  ((run, overrides),) = runs
  config = module.get_config(run)
  for dotted, value in overrides.items():
    section, field = dotted.split(".")
    config[section][field] = value
  return config


def width_case(smoke):
  """configs/width.py's run at m = 2N for the k = 2 cell."""
  return _sweep_config(
      width_config, "cells=khop2,ratios=2,seeds=1" + (",smoke" * smoke)
  )


def learnability_case(smoke):
  """The random UT the learnability experiment trains (its width as
  `trained_to_ut.compile_model` sets it)."""
  config = learnability_config.get_config("smoke" if smoke else None)
  t = config.target.model
  n = bounds.random_threshold(t.num_heads, t.num_layers, t.width)
  ut_spec = types.SimpleNamespace(
      num_heads=t.num_heads,
      num_layers=t.num_layers,
      m=math.ceil(config.m_factor * n),
      head_width=t.width,
  )
  return learnability_lib.ut_config(config, ut_spec, "random", 0)


def za_case(smoke):
  """Zhong & Andreas's Dyck size (benchmarks/peer_bench.py `za`)."""
  config = dyck_config.get_config(
      "model=random,variant=res_ln_mlp," + ("smoke" if smoke else "max_len=60")
  )
  config.model.update(m=16, num_heads=4, head_width=4, mlp_ratio=4)
  if not smoke:
    config.train.batch_size = 1000
  return config


def _from(module, arg):
  return lambda smoke: module.get_config(arg + (",smoke" * smoke))


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  source: str  # The config, as a command names it.
  config: object  # smoke -> config.
  fixed_ut: bool = False  # One UT draw for every seed (a compiled program).


CASES = (
    Case("width", "configs/width.py:cell=khop2 at m = 2N", width_case),
    Case(
        "learnability",
        "configs/learnability.py random UT (m = 1.25 N)",
        learnability_case,
        fixed_ut=True,
    ),
    Case(
        "khop",
        "configs/khop.py:model=random,variant=attn,k=2",
        _from(khop_config, "model=random,variant=attn,k=2"),
    ),
    Case(
        "dyck",
        "configs/dyck.py:model=random",
        _from(dyck_config, "model=random"),
    ),
    Case(
        "za",
        "configs/dyck.py:model=random,variant=res_ln_mlp,max_len=60 (m=16, "
        "H=4, K=4, mlp_ratio=4, batch 1000)",
        za_case,
    ),
    Case(
        "trained",
        "configs/khop.py:model=trained,variant=res_ln_mlp,k=2",
        _from(khop_config, "model=trained,variant=res_ln_mlp,k=2"),
    ),
)
CASE_NAMES = tuple(c.name for c in CASES)


@dataclasses.dataclass
class Cell:
  """One row: a compiled step and what was measured of it."""

  impl: str
  precision: str
  seeds: int
  note: str = ""  # "skipped: ..." or "error: ..." where nothing ran.
  compile_s: float = math.nan
  flops: float = math.nan
  xla_bytes: float = math.nan
  peak_bytes: float | None = None
  grad_diff: float | None = None
  times: list = dataclasses.field(default_factory=list)  # s/step per round.
  steps: int = 1  # Per timed block.
  run: object = None  # () -> None: one block of `steps` steps, waited for.

  @property
  def ms(self):
    return 1e3 * statistics.median(self.times) if self.times else math.nan

  def record(self):
    """What the JSON report keeps of the cell."""
    out = {
        f.name: getattr(self, f.name)
        for f in dataclasses.fields(self)
        if f.name != "run"
    }
    return dict(out, ms_per_step=self.ms)


def one_line(e):
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def seed_configs(case, smoke, n):
  """The configs of seeds 0..n-1, as a sweep varies them (BATCHED_KEYS)."""
  base = case.config(smoke)
  configs = []
  for seed in range(n):
    c = base.copy_and_resolve_references()
    c.seed = seed
    if not case.fixed_ut:
      c.model.ut_seed = seed
    configs.append(c)
  return configs


def _memory(compiled):
  try:
    m = compiled.memory_analysis()
    return float(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )
  except Exception:  # pylint: disable=broad-except  # Not every backend.
    return math.nan


def _flops(compiled):
  """XLA's FLOP count of a compiled (or lowered) computation, or NaN."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # Older jax: one dict per computation.
    cost = cost[0] if cost else None
  return float((cost or {}).get("flops", math.nan))


def peak_bytes():
  stats = jax.devices()[0].memory_stats() or {}
  value = stats.get("peak_bytes_in_use")
  return None if value is None else float(value)


def grad_fn(spec, labels, microbatches, options=None):
  """(params, batch, layers) -> the trainable leaves' mean-loss gradient."""

  def grads(params, batch, layers):
    (_, metrics), g = step_lib.grad_sums(
        params, batch, spec=spec, microbatches=microbatches, layers=layers
    )
    scale = 1.0 / jnp.maximum(metrics["labelled"], 1)
    return [x * scale for x in checkpoint.trainable_leaves(g, labels)]

  return jax.jit(grads, compiler_options=options)


def step_fn(spec, tx, seeds, options=None, microbatches=None):
  """(state, batch, layers) -> (state, metrics): `train_step` for one run;
  for several, the sweep's vmapped group step (layers unused). options:
  XLA compiler options; microbatches: None for the step's default."""
  one = functools.partial(
      step_lib.train_step, spec=spec, tx=tx, microbatches=microbatches
  )
  if seeds == 1:
    step = lambda state, batch, layers: one(state, batch, layers=layers)
  else:
    group = jax.vmap(one)
    step = lambda state, batch, layers: group(state, batch)
  return jax.jit(step, donate_argnums=0, compiler_options=options)


class Bench:
  """Runs cases into a report that is rewritten as its rows come in."""

  def __init__(self, out, *, smoke, seeds, budget_s, rounds, min_block_s):
    self.out, self.smoke, self.seeds = out, smoke, tuple(seeds)
    self.rounds, self.min_block_s = rounds, min_block_s
    self.budget_s = budget_s
    self.start = time.perf_counter()
    self.deadline = self.start + budget_s
    # XLA's lowest optimization level at smoke size: compiles dominate there.
    self.options = SMOKE_OPTIONS if smoke else None
    self.sections = {}  # name -> (lines above its table, cells, lines below).
    self.head, self.foot, self.roofline, self.provenance = [], [], {}, {}

  def left(self):
    return self.deadline - time.perf_counter()

  # --- the report -----------------------------------------------------------

  def header(self):
    self.roofline = {p: _matmul_rate(p) for p in PRECISIONS}
    self.provenance = reports.provenance()
    device = jax.devices()[0]
    self.head = [
        "# gpu_bench: the training step on one device",
        "",
        f"device {device.device_kind} ({device.platform}, "
        f"{jax.device_count()} device(s)); jax {jax.__version__}; commit "
        f"{self.provenance['git_commit']}; {datetime.date.today().isoformat()}; "
        + ("smoke sizes, XLA optimization level 0; " if self.smoke else "")
        + f"budget {self.budget_s:g} s",
        "2048^2 float32 matmul: "
        + ", ".join(
            f"{rate / 1e9:.1f} GFLOP/s at {p}"
            for p, rate in self.roofline.items()
        ),
        "",
        "ms/step: median of interleaved rounds; grad diff: max |g - g_ref| "
        "of the trainable leaves, g_ref at reference/highest; peak MiB: the "
        "process's device peak so far (benchmarks/gpu_bench.py docstring).",
    ]
    self.write()

  def write(self):
    """Writes the report as it stands (to `out`, if any); returns its text."""
    lines = list(self.head)
    for name in CASE_NAMES:
      if name in self.sections:
        above, cells, below = self.sections[name]
        lines += ["", *above] + (["", table(cells)] if cells else []) + below
    text = "\n".join(lines + self.foot) + "\n"
    if self.out:
      reports.write_text(self.out, text)
      reports.write_json(
          os.path.splitext(self.out)[0] + ".json",
          dict(
              smoke=self.smoke,
              budget_s=self.budget_s,
              roofline_flops_per_s=self.roofline,
              cases={
                  name: [cell.record() for cell in cells]
                  for name, (_, cells, _) in self.sections.items()
              },
              provenance=self.provenance,
          ),
      )
    return text

  # --- one case ---------------------------------------------------------------

  def run_case(self, case):
    title = f"## {case.name}: {case.source}"
    if self.left() < (0.0 if self.smoke else MIN_CASE_S):
      why = f"skipped: budget ({max(self.left(), 0):.0f} s left)"
      self.sections[case.name] = ([title, "", why], [], [])
      self.write()
      return
    configs = seed_configs(case, self.smoke, max(self.seeds))
    task = data_lib.make_task(configs[0])
    specs = {
        impl: dataclasses.replace(
            models.model_spec(configs[0], task.info), impl=impl
        )
        for impl in IMPLS
    }
    spec = specs["reference"]
    # Each seed's own draw (a sweep's runs differ in seed and model.ut_seed).
    states = [
        checkpoint.init_state(c, models.model_spec(c, task.info))[0]
        for c in configs
    ]
    _, tx, _ = checkpoint.init_state(configs[0], spec)
    batches = [data_lib.train_batch(c, task, 0) for c in configs]
    b, t = batches[0]["tokens"].shape
    labels = models.labels(states[0].params, spec)
    parts = ", ".join(
        f"{impl} {implementation.microbatches(b, t, specs[impl])}"
        for impl in IMPLS
    )
    above = [
        title,
        "",
        f"{spec.kind}/{spec.variant}: M={spec.model_width} "
        f"H={spec.num_heads} L={spec.num_layers} K={spec.head_width} T={t} "
        f"B={b}, {loop.trainable_count(states[0].params, labels)} trainable "
        f"parameters; microbatches {parts}",
    ]
    cells = [  # One seed first: the grad diffs, and what matters most.
        Cell(impl, precision, n)
        for n in self.seeds
        for impl in IMPLS
        for precision in PRECISIONS
    ]
    below = []
    self.sections[case.name] = (above, cells, below)
    self.write()
    grads, slowest = {}, 0.0
    for cell in cells:
      if self.left() < 2 * slowest:
        cell.note = f"skipped: budget ({max(self.left(), 0):.0f} s left)"
      else:
        # An error is the cell's note, in one line: the xla_cpu forms, say,
        # may not lower on another backend.
        try:
          self.build(cell, specs[cell.impl], tx, states, batches)
          slowest = max(slowest, cell.compile_s)
        except Exception as e:  # pylint: disable=broad-except
          cell.note, cell.run = "error: " + one_line(e), None
        if cell.seeds == 1 and cell.run is not None:
          try:
            self.grad_diff(
                cell, specs[cell.impl], states[0], batches[0], labels, grads
            )
          except Exception as e:  # pylint: disable=broad-except
            cell.note = "grad error: " + one_line(e)
      self.write()
    del states
    self.time_rounds(cells, below)
    for cell in cells:
      cell.run = None  # Frees the cell's device state.
    below.append(f"\ncase done at {time.perf_counter() - self.start:.0f} s")
    self.write()

  def build(self, cell, spec, tx, states, batches):
    """Compiles, warms up and sizes one cell's step."""
    n = cell.seeds
    if n == 1:  # A state of its own: the step donates it.
      state, batch = jax.tree.map(jnp.copy, states[0]), batches[0]
    else:
      state = jax.tree.map(lambda *a: jnp.stack(a), *states[:n])
      batch = jax.tree.map(lambda *a: np.stack(a), *batches[:n])
    batch = jax.device_put(batch)
    layers = _layers(spec, states[0].params, batch) if n == 1 else None
    with jax.default_matmul_precision(cell.precision):
      began = time.perf_counter()
      step = step_fn(spec, tx, n, self.options)
      compiled = step.lower(state, batch, layers).compile()
      cell.compile_s = time.perf_counter() - began
      cell.flops = _flops(compiled)
      b, t = batches[0]["tokens"].shape
      if implementation.microbatches(b, t, spec) > 1:
        # XLA counts a scan's body once: count the whole batch's step,
        # lowered only (the HLO's cost).
        whole = step_fn(spec, tx, n, self.options, microbatches=1)
        cell.flops = _flops(whole.lower(state, batch, layers))
    cell.xla_bytes = _memory(compiled)
    holder = [state]

    def run(steps):
      s = holder[0]
      for _ in range(steps):
        s, metrics = compiled(s, batch, layers)
      jax.block_until_ready((s, metrics))
      holder[0] = s

    run(1)  # Warm-up.
    cell.peak_bytes = peak_bytes()
    began = time.perf_counter()
    run(1)
    per_step = max(time.perf_counter() - began, 1e-9)
    cell.steps = max(1, math.ceil(self.min_block_s / per_step))
    cell.run = lambda: run(cell.steps)

  def grad_diff(self, cell, spec, state, batch, labels, grads):
    """The cell's gradient at seed 0's initial state and batch, against the
    reference at highest (the cells' order computes that first)."""
    batch = jax.device_put(batch)
    b, t = batch["tokens"].shape
    parts = implementation.microbatches(b, t, spec)
    layers = _layers(spec, state.params, batch)
    with jax.default_matmul_precision(cell.precision):
      fn = grad_fn(spec, labels, parts, self.options)
      g = [np.asarray(x, np.float64) for x in fn(state.params, batch, layers)]
    grads[(cell.impl, cell.precision)] = g
    if REFERENCE in grads:
      cell.grad_diff = max(
          float(np.max(np.abs(x - r))) for x, r in zip(g, grads[REFERENCE])
      )

  def time_rounds(self, cells, below):
    """Interleaved rounds over the built cells, while the budget lasts."""
    ready = [c for c in cells if c.run is not None]
    last = 0.0
    for r in range(self.rounds if ready else 0):
      if r and self.left() < 1.2 * last:
        below.append(f"\ntimed rounds ended after {r} of {self.rounds}: budget")
        break
      began = time.perf_counter()
      for i in range(len(ready)):  # Rotated: each cell leads in turn.
        cell = ready[(i + r) % len(ready)]
        t0 = time.perf_counter()
        cell.run()
        cell.times.append((time.perf_counter() - t0) / cell.steps)
      last = time.perf_counter() - began
      self.write()


def _layers(spec, params, batch):
  """The frozen layers as `step_lib.make_step` passes them (split where the
  model reads them so), or None."""
  t = batch["tokens"].shape[1]
  if not implementation.splits_layers(spec, t):
    return None
  return implementation.split_frozen(params, spec, t)["layers"]


def table(cells):
  """The markdown table of a case's cells."""
  fmt = lambda v, f: "-" if v is None or not math.isfinite(v) else f.format(v)
  rows = []
  for c in cells:
    rate = c.flops / (c.ms / 1e3) if c.times else math.nan
    peak = None if c.peak_bytes is None else c.peak_bytes / 2**20
    rows.append(
        {
            "impl": c.impl,
            "precision": c.precision,
            "seeds": str(c.seeds),
            "compile s": fmt(c.compile_s, "{:.2f}"),
            "ms/step": fmt(c.ms, "{:.3f}"),
            "ms/run": fmt(c.ms / c.seeds, "{:.3f}"),
            "GFLOP/s": fmt(rate / 1e9, "{:.3g}"),  # Tiny cases run < 0.05.
            "XLA MiB": fmt(c.xla_bytes / 2**20, "{:.1f}"),
            "peak MiB": fmt(peak, "{:.0f}"),
            "grad diff": fmt(c.grad_diff, "{:.3g}"),
            "note": c.note or f"{len(c.times)} rounds x {c.steps} steps",
        }
    )
  return reports.format_table(rows)


def _matmul_rate(precision):
  with jax.default_matmul_precision(precision):
    return roofline_lib.rate(roofline_lib.make())[0]


def run(
    out=None,
    *,
    cases=CASE_NAMES,
    smoke=False,
    seeds=SEEDS,
    budget_s=420.0,
    rounds=None,
    min_block_s=None,
):
  """Runs the cases; returns the report's text (also written to `out`)."""
  bad = [c for c in cases if c not in CASE_NAMES]
  if bad:
    raise UserError(
        f"unknown case {bad[0]!r}; use some of {','.join(CASE_NAMES)} or all"
    )
  rounds = rounds if rounds is not None else (2 if smoke else 5)
  min_block_s = (
      min_block_s if min_block_s is not None else (0.0 if smoke else 0.05)
  )
  try:
    seeds = sorted({int(n) for n in seeds}) or [0]
  except ValueError:
    seeds = [0]
  if rounds < 1 or min_block_s < 0 or not budget_s >= 0 or seeds[0] < 1:
    raise UserError(
        f"--rounds={rounds}, --min_block_s={min_block_s}, --budget_s="
        f"{budget_s}, --seeds={','.join(map(str, seeds))}; use rounds >= 1, "
        "seeds positive integers (e.g. 1,3,8) and the others >= 0"
    )
  bench = Bench(
      out,
      smoke=smoke,
      seeds=seeds,
      budget_s=budget_s,
      rounds=rounds,
      min_block_s=min_block_s,
  )
  bench.header()
  for case in CASES:
    if case.name in cases:
      try:
        bench.run_case(case)
      except Exception as e:  # pylint: disable=broad-except  # One line.
        title = f"## {case.name}: {case.source}"
        above, cells, below = bench.sections.get(case.name, ([title], [], []))
        bench.sections[case.name] = (above, cells, below)
        below.append("\nerror: " + one_line(e))
        for cell in cells:
          cell.run = None  # Frees the cell's device state.
        bench.write()
  bench.foot = [f"\ntotal {time.perf_counter() - bench.start:.0f} s"]
  return bench.write()


def main(argv):
  del argv
  cases = (
      CASE_NAMES if flags.FLAGS.cases == "all" else flags.FLAGS.cases.split(",")
  )
  try:
    if flags.FLAGS.out:
      for path in (
          flags.FLAGS.out,
          os.path.splitext(flags.FLAGS.out)[0] + ".json",
      ):
        reports.check_output(path, flags.FLAGS.overwrite, "--overwrite")
    text = run(
        flags.FLAGS.out,
        cases=cases,
        smoke=flags.FLAGS.smoke,
        budget_s=flags.FLAGS.budget_s,
        rounds=flags.FLAGS.rounds,
        min_block_s=flags.FLAGS.min_block_s,
        seeds=flags.FLAGS.seeds,
    )
  except UserError as e:
    sys.exit(f"error: {e}")
  print(text, end="")
  if flags.FLAGS.out:
    print(f"wrote {flags.FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
