r"""A Dyck training step's gradient with every row's logits or the last row's.

  taskset -c 0 python -m benchmarks.last_only_bench                # 5 models
  taskset -c 0 python -m benchmarks.last_only_bench --microbatches=0
  taskset -c 0 python -m benchmarks.last_only_bench --models=random,sparse

Dyck-1 labels only the last position (the '?' query), so the loss reads only
the last row of the last layer. For each model, one jitted step, the value
and gradient of the last position's mean cross-entropy w.r.t. the trainable
parameters (frozen leaves under stop_gradient, as `step_lib.train_step` has
them), computed two ways in the same process:
  full       `models.apply(params, spec, tokens)[:, -1]`: every row's logits
             (for the attention-only random UT in its coefficient form too);
  last_only  `models.apply(..., last_only=True)`: the last layer's queries,
             attention output, residual, MLP and unembedding for the last row;
  m_wide     with impl xla_cpu, the random UT's last_only computed layer by
             layer on the M-wide state (`ut.cpu.forward.apply_m_wide`), the
             order `last_only` used before the attention-only random UT's
             coefficient form (`_random_attn_coefficients`); printed for
             the random UTs only (elsewhere it is last_only itself).
Models: configs/dyck.py (batch 128, 60 brackets and the '?': T = 61) with
model=sparse, random, random with m=512, trained, and trained with
variant=res_ln_mlp (spec and parameters as `ut.training.train` builds them:
`models.model_spec`, `models.init`), at the implementation --impl names
(default "auto": xla_cpu on a CPU backend).

Timing: one batch already on the device; each timed block runs whole steps for
at least --min_block_s, full, last_only and the roofline (a jitted jnp.dot of
two 2048 x 2048 float32 matrices, `ut.io.roofline`) interleaved round by
round, so that all three see the same load from other processes; ms/step and
the roofline's GFLOP/s are medians over --repeats rounds. Also printed: XLA's
FLOP count of each compiled step (cost_analysis), and the largest relative
difference of the two gradients (float32 rounding only: they are the same
function). --microbatches=N splits the batch into N parts whose gradients a
lax.scan adds up (as `step_lib.grad_sums`); 0: `implementation.microbatches`, the
count a CPU training run uses (the same for full and last_only; m_wide
gets the count the rule gives the M-wide order).
"""

import math
import os
import statistics

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import optax

from configs import dyck as dyck_config
from ut.cpu import forward as cpu_forward
from ut.io import roofline as roofline_lib
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib

# name: (configs/dyck.py argument, config.model fields set on top).
MODELS = {
    "sparse": ("model=sparse", {}),
    "random": ("model=random", {}),
    "random_m512": ("model=random", {"m": 512}),
    "trained": ("model=trained", {}),
    "trained_mlp": ("model=trained,variant=res_ln_mlp", {}),
}

_MODELS = flags.DEFINE_list(
    "models", list(MODELS), f"Which models, of {', '.join(MODELS)}."
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 7, "Timed rounds (medians reported).", lower_bound=1
)
_MIN_BLOCK_S = flags.DEFINE_float(
    "min_block_s",
    0.25,
    "Each timed block runs whole steps for at least this many seconds.",
)
_IMPL = flags.DEFINE_enum(
    "impl",
    "auto",
    list(models.IMPLS),
    "model.impl: the implementation every contender runs.",
)
_MICROBATCHES = flags.DEFINE_integer(
    "microbatches",
    1,
    "Parts the batch is split into; 0: implementation.microbatches.",
    lower_bound=0,
)


def make_case(name):
  """(spec, params, batch) of one model, as `ut.training.train` builds them."""
  arg, fields = MODELS[name]
  config = dyck_config.get_config(arg)
  config.model.update(fields)
  config.model.impl = _IMPL.value
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  params = models.init(jax.random.PRNGKey(config.seed), spec)
  batch = data_lib.train_batch(config, task, 0)
  batch = dict(tokens=batch["tokens"], labels=batch["labels"][:, -1])
  return spec, params, jax.device_put(batch)


def grad_step(spec, params, microbatches, last_only, apply=models.apply):
  """The jitted step: (loss, gradients) of the last position's mean
  cross-entropy, summed over `microbatches` parts by a lax.scan; apply:
  `models.apply` or a function of the same arguments."""
  labels = models.labels(params, spec)

  def loss_sum(params, part):
    params = jax.tree.map(
        lambda p, label: jax.lax.stop_gradient(p) if label == "frozen" else p,
        params,
        labels,
    )
    logits = apply(params, spec, part["tokens"], last_only=last_only)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits[:, -1], part["labels"]
    ).sum()

  def step(params, batch):
    b = batch["labels"].shape[0]
    grad_fn = jax.value_and_grad(loss_sum)
    if microbatches == 1:
      loss, grads = grad_fn(params, batch)
    else:
      parts = jax.tree.map(
          lambda a: a.reshape(microbatches, b // microbatches, *a.shape[1:]),
          batch,
      )
      zeros = jax.tree.map(jnp.zeros_like, (jnp.zeros(()), params))
      add = lambda total, part: (
          jax.tree.map(jnp.add, total, grad_fn(params, part)),
          None,
      )
      loss, grads = jax.lax.scan(add, zeros, parts)[0]
    return loss / b, jax.tree.map(lambda g: g / b, grads)

  return jax.jit(step)


def xla_flops(compiled):
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # Older jax: one dict per computation.
    cost = cost[0]
  return float(cost["flops"])


def bench(name, roofline, repeats, min_block_s):
  """Times both steps and the roofline, interleaved; returns a dict of medians."""
  spec, params, batch = make_case(name)
  b, t = batch["tokens"].shape
  n = _MICROBATCHES.value or implementation.microbatches(b, t, spec)
  contenders = [
      ("full", False, models.apply, n),
      ("last_only", True, models.apply, n),
  ]
  n_wide = None
  if (
      spec.kind == "random"
      and implementation.resolve_impl(spec.impl) == "xla_cpu"
  ):
    # With --microbatches=0, the count the rule gives the M-wide order.
    n_wide = _MICROBATCHES.value or implementation.microbatches(
        b, t, spec, m_wide=True
    )
    contenders.append(("m_wide", True, cpu_forward.apply_m_wide, n_wide))
  compiled = {
      label: grad_step(spec, params, parts, last_only, apply)
      .lower(params, batch)
      .compile()
      for label, last_only, apply, parts in contenders
  }
  outs = {label: fn(params, batch) for label, fn in compiled.items()}
  flat = {label: jax.tree.leaves(out) for label, out in outs.items()}
  rel = max(
      float(jnp.abs(g - w).max() / jnp.maximum(jnp.abs(w).max(), 1e-30))
      for label in flat
      if label != "full"
      for g, w in zip(flat[label], flat["full"])
  )

  def steps(fn):
    return lambda k: [
        jax.block_until_ready(fn(params, batch)) for _ in range(k)
    ]

  roof_fn, roof_flops = roofline
  fns = {label: steps(fn) for label, fn in compiled.items()}
  fns["roofline"] = lambda k: [
      jax.block_until_ready(roof_fn()) for _ in range(k)
  ]
  counts = {}
  for label, fn in fns.items():
    fn(2)  # Warm up.
    once = roofline_lib.seconds(lambda fn=fn: fn(1))
    counts[label] = max(1, math.ceil(min_block_s / once))
  times = {label: [] for label in fns}
  for _ in range(repeats):
    for label, fn in fns.items():
      k = counts[label]
      times[label].append(roofline_lib.seconds(lambda fn=fn, k=k: fn(k)) / k)
  med = {label: statistics.median(v) for label, v in times.items()}
  return dict(
      name=name,
      shape=(
          f"{spec.kind}/{spec.variant} M={spec.model_width} "
          f"H={spec.num_heads} L={spec.num_layers} T={t} B={b} "
          f"microbatches={n}"
          + ("" if n_wide is None else f" (m_wide {n_wide})")
          + f" impl={implementation.resolve_impl(spec.impl)}"
      ),
      full_ms=med["full"] * 1e3,
      last_ms=med["last_only"] * 1e3,
      m_wide_ms=med["m_wide"] * 1e3 if "m_wide" in med else None,
      roof_gflops=roof_flops / med["roofline"] / 1e9,
      full_gf=xla_flops(compiled["full"]) / 1e9,
      last_gf=xla_flops(compiled["last_only"]) / 1e9,
      rel=rel,
  )


def main(argv):
  del argv
  unknown = set(_MODELS.value) - set(MODELS)
  if unknown:
    raise app.UsageError(f"unknown --models {sorted(unknown)}; use {MODELS}")
  repeats = _REPEATS.value
  print(
      f"[last_only] jax {jax.__version__} on {jax.devices()[0].platform}, "
      f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs (1-min load "
      f"average {os.getloadavg()[0]:.1f}); medians of {repeats} interleaved "
      "rounds; step = value_and_grad of the last position's cross-entropy",
      flush=True,
  )
  roofline = roofline_lib.make()
  results = []
  header = (
      f"  {'model':<12s} {'full ms':>8s} {'last ms':>8s} {'ratio':>6s} "
      f"{'m_wide ms':>9s} {'m_wide/last':>11s} "
      f"{'full GF':>8s} {'last GF':>8s} {'matmul GF/s':>11s} {'grad rel':>9s}"
  )
  for name in _MODELS.value:
    r = bench(name, roofline, repeats, _MIN_BLOCK_S.value)
    results.append(r)
    print(
        f"  {name}: {r['shape']}: full {r['full_ms']:.2f} ms, last_only "
        f"{r['last_ms']:.2f} ms",
        flush=True,
    )
  print(header)
  for r in results:
    wide = r["m_wide_ms"]
    wide_cols = (
        f"{wide:9.2f} {wide / r['last_ms']:11.2f}"
        if wide is not None
        else f"{'-':>9s} {'-':>11s}"
    )
    print(
        f"  {r['name']:<12s} {r['full_ms']:8.2f} {r['last_ms']:8.2f} "
        f"{r['full_ms'] / r['last_ms']:6.2f} {wide_cols} {r['full_gf']:8.3f} "
        f"{r['last_gf']:8.3f} {r['roof_gflops']:11.1f} {r['rel']:9.1e}"
    )
  print(
      "  ratio = full ms / last_only ms; m_wide/last = m_wide ms / "
      "last_only ms; GF = XLA's FLOP count of the "
      "compiled step (with microbatches, XLA counts the scan's body once: "
      "one part's); matmul GF/s = the 2048^2 float32 jnp.dot timed in the "
      "same rounds; grad rel = max |last_only or m_wide - full| / max |full| "
      "per leaf"
  )


if __name__ == "__main__":
  app.run(main)
