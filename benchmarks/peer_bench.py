r"""The `ut` training step against a textbook JAX step and a PyTorch step.

  python -m benchmarks.peer_bench                 # Zhong & Andreas's Dyck size
  python -m benchmarks.peer_bench --case=all      # and the protocols' defaults
  python -m benchmarks.peer_bench --out=results/bench   # also saved
  python -m benchmarks.peer_bench --startup=compare     # start-ups, one core or all

Start-up (`--startup`): this process starts JAX as the launchers do
(`launcher`: XLA CPU's thread pool as `ut.training.train.cpu_threads` sizes it
for the first case, `ut.cpu.host.start_backend`) or with XLA's pool of one thread per core
(`xla`). `--startup=compare` times the `ut` step alone in fresh processes,
interleaved: as the launchers start it, as XLA would on every core, and
pinned to one core (`taskset -c 0`'s mask), and prints ms/step for each.

PyTorch is optional (`pip install -e '.[bench]'`); without it the torch column
is skipped and said so.

Cases (`--case`, comma-separated, or `all`):
  za          Zhong & Andreas's Dyck size: the random UT with pre-LN blocks and a
              frozen GELU MLP (res_ln_mlp), width m = 16, 4 heads of width 4,
              2 layers, MLP width 64, batch 1000, 60 brackets + '?' = 61 tokens;
              only E and U train.
  dyck_random, dyck_sparse, dyck_trained
              configs/dyck.py's defaults (attention-only) at its batch size.
  khop_random, khop_sparse, khop_trained
              configs/khop.py's defaults with res_ln at the largest k of the
              k-hop table (configs/khop_table.py).

Three implementations of one step (forward, backward, gradient clipping and
AdamW on the trainable leaves), timed interleaved in one process:
  ut         `ut.training.train.make_step`, as `launch.train` runs it.
  textbook   a jitted JAX step written here from the model's definition:
             einsum, `jax.nn.softmax`, a plain LayerNorm; the sparse UT as its
             dense {0,1} matrices (`sparse.to_dense`).
  torch      PyTorch eager, the same model, `scaled_dot_product_attention`
             (fused attention) and `torch.optim.AdamW`.
  torch_last where `ut` computes the last layer for the last row only (Dyck:
             its only label is there), the PyTorch step doing the same: the
             same algorithm, so its ratio compares implementations.
Before timing, the loss and the gradients of the trainable leaves of the three
are compared (float32, relative to the largest entry); a mismatch stops the
benchmark.

Floors, measured in the same process:
  flop      the step's FLOPs (XLA's cost analysis of the textbook step) at the
            2048^2 float32 matmul speed (`ut.io.roofline`).
  mem       the attention probabilities are B H T^2 floats per layer; a step
            that materialises them reads or writes them about 11 times per
            layer (softmax forward and backward, the two products with them and
            their gradients), a fused softmax about 6 times. The floor is that
            many passes at the measured copy bandwidth (a numpy copy of
            256 MiB: bytes read plus bytes written over the time).
"""

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from configs import dyck as dyck_config
from configs import khop as khop_config
from configs import khop_table
from ut.core.constructions import sparse
from ut.cpu import host
from ut.io import reports
from ut.io import roofline as roofline_lib
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import models
from ut.training import step as step_lib

try:
  import torch  # pylint: disable=g-import-not-at-top
  import torch.nn.functional as F  # pylint: disable=g-import-not-at-top
except ImportError:
  torch = None

_CASE = flags.DEFINE_string("case", "za", "Comma-separated cases, or 'all'.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed rounds (medians).")
_STEPS = flags.DEFINE_integer("steps", 3, "Steps per timed block.")
_OUT = flags.DEFINE_string("out", None, "Also save peer_bench.md/.json here.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a saved report.")
_STARTUP = flags.DEFINE_enum(
    "startup",
    "launcher",
    ["launcher", "xla", "compare"],
    "How JAX starts: as the launchers do, XLA's default, or compare both "
    "and one pinned core in fresh processes (see the docstring).",
)
_UT_ONLY = flags.DEFINE_bool(
    "ut_only", False, "Time the ut step alone (--startup=compare's children)."
)
# --startup=compare's start-ups: (name, the child's --startup, pinned).
STARTUPS = (
    ("launcher", "launcher", False),
    ("xla, all cores", "xla", False),
    ("pinned, one core", "xla", True),
)

CASES = (
    "za",
    "dyck_random",
    "dyck_sparse",
    "dyck_trained",
    "khop_random",
    "khop_sparse",
    "khop_trained",
)
TOLERANCE = 2e-4  # float32: relative to the largest entry of each leaf.


def case_config(name):
  """The ml_collections config of a case."""
  if name == "za":
    config = dyck_config.get_config(
        "model=random,variant=res_ln_mlp,max_len=60"
    )
    config.model.update(m=16, num_heads=4, head_width=4, mlp_ratio=4)
    config.train.batch_size = 1000
    return config
  task, kind = name.split("_")
  if task == "dyck":
    return dyck_config.get_config(f"model={kind}")
  runs = []
  khop_table.sweep(lambda run, **_: runs.append(run))
  k = max(
      int(item[2:])
      for run in runs
      for item in run.split(",")
      if item.startswith("k=")
  )
  return khop_config.get_config(f"model={kind},variant=res_ln,k={k}")


@dataclasses.dataclass
class Case:
  """Everything the three steps need, built from one config."""

  name: str
  spec: object
  params: dict
  batch: dict
  config: object


def build(name):
  config = case_config(name)
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  state, _, _ = checkpoint.init_state(config, spec)
  batch = jax.tree.map(np.asarray, data_lib.train_batch(config, task, 0))
  return Case(name, spec, jax.device_get(state.params), batch, config)


def dense_layers(case):
  """wq, wk, wv (L, H, M, K) and wo (L, H, K, M) or None, for every kind."""
  spec, p = case.spec, case.params
  if spec.kind == "sparse":
    d = sparse.to_dense(spec.sparse_ut, np.float32)
    tile = lambda w: np.repeat(w, spec.num_layers, axis=0)
    return tile(d["wq"]), tile(d["wk"]), tile(d["wv"]), None
  layers = p["layers"]
  stack = lambda w: (np.repeat(w, spec.num_layers, 0) if w.shape[0] == 1 else w)
  wo = layers.get("wo")
  return (
      stack(layers["wq"]),
      stack(layers["wk"]),
      stack(layers["wv"]),
      None if wo is None else stack(wo),
  )


def split_params(case):
  """(trainable, frozen) plain dicts of numpy arrays."""
  wq, wk, wv, wo = dense_layers(case)
  trainable = dict(
      token=case.params["embed"]["token"],
      position=case.params["embed"]["position"],
      unembed=case.params["unembed"],
  )
  frozen = dict(wq=wq, wk=wk, wv=wv)
  if wo is not None:
    frozen["wo"] = wo
  if "mlp" in case.params:
    frozen.update({f"mlp_{k}": v for k, v in case.params["mlp"].items()})
  if case.spec.kind == "trained":  # Every weight trains.
    trainable.update(frozen)
    frozen = {}
  return (
      {k: np.asarray(v, np.float32) for k, v in trainable.items()},
      {k: np.asarray(v, np.float32) for k, v in frozen.items()},
  )


# --- the textbook JAX step --------------------------------------------------


def _layer_norm(z):
  mean = z.mean(-1, keepdims=True)
  var = jnp.square(z - mean).mean(-1, keepdims=True)
  return (z - mean) * jax.lax.rsqrt(var + 1e-5)


def textbook_logits(p, spec, tokens):
  assert spec.causal, "the textbook and torch steps are causal"
  t = tokens.shape[1]
  z = p["token"][tokens] + p["position"][:t][None]
  mask = jnp.tril(jnp.ones((t, t), bool))
  ln = spec.variant != "attn"
  for layer in range(spec.num_layers):
    x = _layer_norm(z) if ln else z
    q = jnp.einsum("btm,hmk->bhtk", x, p["wq"][layer])
    k = jnp.einsum("btm,hmk->bhtk", x, p["wk"][layer])
    v = jnp.einsum("btm,hmv->bhtv", x, p["wv"][layer])
    s = jnp.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(q.shape[-1])
    a = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
    o = jnp.einsum("bhts,bhsv->bhtv", a, v)
    out = (
        jnp.einsum("bhtv,hvm->btm", o, p["wo"][layer])
        if "wo" in p
        else o.sum(1)
    )
    z = z + out if spec.variant != "attn" else out
    if spec.variant == "res_ln_mlp":
      h = jax.nn.gelu(_layer_norm(z) @ p["mlp_w1"][layer] + p["mlp_b1"][layer])
      z = z + h @ p["mlp_w2"][layer] + p["mlp_b2"][layer]
  if ln:
    z = _layer_norm(z)
  return z @ p["unembed"]


def textbook_loss(trainable, frozen, spec, batch):
  logits = textbook_logits({**trainable, **frozen}, spec, batch["tokens"])
  labels = batch["labels"]
  valid = labels >= 0
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits, jnp.maximum(labels, 0)
  )
  return jnp.sum(ce * valid) / jnp.maximum(jnp.sum(valid), 1)


def textbook_step(case):
  """(step(state) -> state, state, loss_and_grads) for the textbook model."""
  tc = case.config.train
  trainable, frozen = split_params(case)
  tx = optax.chain(
      optax.clip_by_global_norm(tc.grad_clip),
      optax.adamw(tc.lr, b1=0.9, b2=0.98, weight_decay=tc.weight_decay),
  )
  batch = jax.device_put(case.batch)
  frozen = jax.device_put(frozen)
  grad_fn = jax.value_and_grad(textbook_loss)

  # Frozen weights and the batch are arguments, not constants of the jaxpr
  # (XLA would constant-fold through them at compile time).
  @jax.jit
  def jitted(state, frozen, batch):
    params, opt = state
    loss, grads = grad_fn(params, frozen, case.spec, batch)
    updates, opt = tx.update(grads, opt, params)
    return (optax.apply_updates(params, updates), opt), loss

  grads_jit = jax.jit(lambda p, f, b: grad_fn(p, f, case.spec, b))
  params = jax.device_put(trainable)
  step = lambda state: jitted(state, frozen, batch)
  step.lower = lambda state: jitted.lower(state, frozen, batch)
  return (
      step,
      (params, tx.init(params)),
      lambda p: grads_jit(p, frozen, batch),
  )


# --- the PyTorch step ---------------------------------------------------------


def torch_step(case, last_only=False):
  """(step() -> loss, loss_and_grads()) for the same model in PyTorch eager.

  last_only (for a task whose labels all sit at the last position, as
  Dyck's): the last layer computes its queries, attention output, residual,
  MLP, LayerNorm and logits for the last row only, as `ut` does
  (`models.apply(..., last_only=True)`): the same loss and gradients."""
  spec, tc = case.spec, case.config.train
  trainable, frozen = split_params(case)
  tp = {k: torch.tensor(v, requires_grad=True) for k, v in trainable.items()}
  fp = {k: torch.tensor(v) for k, v in frozen.items()}
  tokens = torch.tensor(np.asarray(case.batch["tokens"]), dtype=torch.long)
  labels = torch.tensor(np.asarray(case.batch["labels"]), dtype=torch.long)
  if last_only:
    labels = labels[:, -1:]
  valid = labels >= 0
  ln = spec.variant != "attn"
  norm = lambda z: F.layer_norm(z, z.shape[-1:], eps=1e-5)

  def loss_fn():
    p = {**tp, **fp}
    t = tokens.shape[1]
    z = p["token"][tokens] + p["position"][:t][None]
    for layer in range(spec.num_layers):
      x = norm(z) if ln else z
      last = last_only and layer == spec.num_layers - 1
      # The last row attends to every row: no mask.
      q = torch.einsum(
          "btm,hmk->bhtk", x[:, -1:] if last else x, p["wq"][layer]
      )
      k = torch.einsum("btm,hmk->bhtk", x, p["wk"][layer])
      v = torch.einsum("btm,hmv->bhtv", x, p["wv"][layer])
      o = F.scaled_dot_product_attention(q, k, v, is_causal=not last)
      if last:
        z = z[:, -1:]
      out = (
          torch.einsum("bhtv,hvm->btm", o, p["wo"][layer])
          if "wo" in p
          else o.sum(1)
      )
      z = z + out if ln else out
      if spec.variant == "res_ln_mlp":
        h = F.gelu(
            norm(z) @ p["mlp_w1"][layer] + p["mlp_b1"][layer],
            approximate="tanh",
        )
        z = z + h @ p["mlp_w2"][layer] + p["mlp_b2"][layer]
    if ln:
      z = norm(z)
    logits = z @ p["unembed"]
    ce = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.clamp(min=0).reshape(-1),
        reduction="none",
    )
    return (ce * valid.reshape(-1)).sum() / valid.sum().clamp(min=1)

  opt = torch.optim.AdamW(
      list(tp.values()),
      lr=tc.lr,
      betas=(0.9, 0.98),
      weight_decay=tc.weight_decay,
  )

  def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(tp.values()), tc.grad_clip)
    opt.step()
    return loss

  def loss_grads():
    for v in tp.values():
      v.grad = None
    loss = loss_fn()
    loss.backward()
    return float(loss), {k: v.grad.numpy().copy() for k, v in tp.items()}

  return step, loss_grads


# --- the ut step ---------------------------------------------------------------


def ut_step(case):
  """(step(state) -> (state, metrics), state, loss_and_grads) as launch.train."""
  state, tx, _ = checkpoint.init_state(case.config, case.spec)
  step, place_state, place_batch = step_lib.make_step(
      case.config, case.spec, tx
  )
  batch = place_batch(jax.device_put(case.batch))
  run = lambda s: step(s, batch)
  grad_fn = jax.jit(
      jax.value_and_grad(
          lambda p: step_lib.loss_and_metrics(p, case.spec, batch)[0]
      )
  )
  return run, place_state(state), grad_fn


def _ut_grads_as_split(case, grads):
  """The ut gradient of the trainable leaves, named as `split_params` names them."""
  out = dict(
      token=grads["embed"]["token"],
      position=grads["embed"]["position"],
      unembed=grads["unembed"],
  )
  if case.spec.kind == "trained":
    out.update(grads["layers"])
    out.update({f"mlp_{k}": v for k, v in grads.get("mlp", {}).items()})
  return {k: np.asarray(v) for k, v in out.items()}


def check_agree(case, tb_grads, ut_grads, th_grads):
  """Raises if a loss or gradient of the three differs; returns the max error."""
  worst = 0.0
  ref_loss, ref = tb_grads
  others = [("ut", ut_grads)] + ([("torch", th_grads)] if th_grads else [])
  for who, (loss, grads) in others:
    if abs(loss - ref_loss) > TOLERANCE * max(1.0, abs(ref_loss)):
      sys.exit(f"error: {case.name}: {who} loss {loss} != textbook {ref_loss}")
    for name, want in ref.items():
      got = np.asarray(grads[name])
      scale = max(float(np.abs(want).max()), 1e-30)
      err = float(np.abs(got - np.asarray(want)).max()) / scale
      worst = max(worst, err)
      if err > TOLERANCE:
        sys.exit(
            f"error: {case.name}: {who} gradient of {name} differs from "
            f"the textbook step by {err:.2e} of its largest entry"
        )
  return worst


# --- floors and timing ----------------------------------------------------------


def copy_bandwidth(mib=256, repeats=5):
  """Bytes read plus written per second by a numpy copy of `mib` MiB."""
  src = np.ones(mib * 2**20 // 4, np.float32)
  dst = np.empty_like(src)
  np.copyto(dst, src)
  secs = statistics.median(
      _timed(lambda: np.copyto(dst, src)) for _ in range(repeats)
  )
  return 2 * src.nbytes / secs


def _timed(fn):
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def attention_bytes(case):
  b, t = case.batch["tokens"].shape
  return 4 * b * case.spec.num_heads * t * t * case.spec.num_layers


def measure(case, roofline, bandwidth):
  """One row: ms/step of the three (medians), ratios, floors."""
  tb_step, tb_state, tb_grads = textbook_step(case)
  u_step, u_state, u_grads = ut_step(case)
  th = torch_step(case) if torch is not None else None
  # A PyTorch step with ut's last-row algorithm, where ut uses it.
  th_last = torch_step(case, True) if th and case.spec.last_only else None
  tb_loss, tb_g = tb_grads(tb_state[0])
  u_loss, u_g = u_grads(u_state.params)
  err = check_agree(
      case,
      (float(tb_loss), jax.device_get(tb_g)),
      (float(u_loss), _ut_grads_as_split(case, u_g)),
      th[1]() if th else None,
  )
  if th_last:
    err = max(
        err,
        check_agree(
            case,
            (float(tb_loss), jax.device_get(tb_g)),
            (float(u_loss), _ut_grads_as_split(case, u_g)),
            th_last[1](),
        ),
    )
  flops = tb_step.lower(tb_state).compile().cost_analysis()
  flops = (flops[0] if isinstance(flops, list) else flops).get("flops", 0.0)
  states = {"ut": u_state, "textbook": tb_state}

  def block(name):
    def run():
      if name.startswith("torch"):
        fn = (th if name == "torch" else th_last)[0]
        for _ in range(_STEPS.value):
          fn()
        return
      s = states[name]
      for _ in range(_STEPS.value):
        s, metrics = (tb_step if name == "textbook" else u_step)(s)
      jax.block_until_ready(metrics)
      states[name] = s

    return run

  names = (
      ["ut", "textbook"]
      + (["torch"] if th else [])
      + (["torch_last"] if th_last else [])
  )
  for name in names:  # Warm-up (compiles).
    block(name)()
  times = {n: [] for n in names}
  for _ in range(_REPEATS.value):
    for name in names:
      times[name].append(_timed(block(name)) / _STEPS.value)
  ms = {n: 1e3 * statistics.median(v) for n, v in times.items()}
  dot_rate, _ = roofline_lib.rate(roofline)
  attn = attention_bytes(case)
  row = dict(
      case=case.name,
      batch=int(case.batch["tokens"].shape[0]),
      tokens=int(case.batch["tokens"].shape[1]),
      ut_ms=ms["ut"],
      textbook_ms=ms["textbook"],
      torch_ms=ms.get("torch", float("nan")),
      textbook_over_ut=ms["textbook"] / ms["ut"],
      torch_over_ut=ms.get("torch", float("nan")) / ms["ut"],
      torch_last_ms=ms.get("torch_last", float("nan")),
      torch_last_over_ut=ms.get("torch_last", float("nan")) / ms["ut"],
      flop_floor_ms=1e3 * flops / dot_rate,
      mem_floor_ms=1e3 * 11 * attn / bandwidth,
      fused_mem_floor_ms=1e3 * 6 * attn / bandwidth,
      dot_gflops=dot_rate / 1e9,
      max_grad_err=err,
  )
  row["ut_over_fused_floor"] = ms["ut"] / row["fused_mem_floor_ms"]
  return row


def ut_only(case):
  """ms/step of the ut step alone: the median of --repeats blocks."""
  run, state, _ = ut_step(case)
  states = [state]

  def block(steps=_STEPS.value):
    s = states[0]
    for _ in range(steps):
      s, metrics = run(s)
    jax.block_until_ready(metrics)
    states[0] = s

  block(2)  # Warm-up (compiles).
  times = [_timed(block) / _STEPS.value for _ in range(_REPEATS.value)]
  return 1e3 * statistics.median(times)


def _child(name, startup, pinned):
  """ms/step of the ut step in a fresh process started as `startup`."""
  cmd = [
      sys.executable,
      "-m",
      "benchmarks.peer_bench",
      f"--case={name}",
      f"--startup={startup}",
      "--ut_only",
      f"--repeats={_REPEATS.value}",
      f"--steps={_STEPS.value}",
  ]
  first = min(os.sched_getaffinity(0))
  pin = (lambda: os.sched_setaffinity(0, {first})) if pinned else None
  out = subprocess.run(
      cmd, capture_output=True, text=True, check=True, preexec_fn=pin
  )
  return json.loads(out.stdout.strip().splitlines()[-1])["ut_ms"]


def compare_startups(names, rounds=3):
  """Rows of ms/step per start-up (medians over `rounds` interleaved fresh
  processes each), and each one's ratio to the pinned core's."""
  rows = []
  for name in names:
    times = {label: [] for label, _, _ in STARTUPS}
    for _ in range(rounds):
      for label, startup, pinned in STARTUPS:
        times[label].append(_child(name, startup, pinned))
    pinned_ms = statistics.median(times[STARTUPS[-1][0]])
    row = dict(case=name, cores=len(os.sched_getaffinity(0)))
    for label, _, _ in STARTUPS:
      row[f"{label} ms"] = statistics.median(times[label])
    for label, _, _ in STARTUPS[:-1]:
      row[f"{label} / pinned"] = row[f"{label} ms"] / pinned_ms
    rows.append(row)
    print(json.dumps(row), flush=True)
  return rows


def main(argv):
  del argv
  names = CASES if _CASE.value == "all" else _CASE.value.split(",")
  bad = [n for n in names if n not in CASES]
  if bad or _REPEATS.value < 1 or _STEPS.value < 1:
    sys.exit(
        f"error: --case={_CASE.value!r} (use any of {', '.join(CASES)} or "
        "all), --repeats and --steps >= 1"
    )
  if _STARTUP.value == "launcher":  # As launch.train starts the first case.
    host.start_backend(models.cpu_threads(case_config(names[0])))
  if _OUT.value:
    reports.check_output(
        os.path.join(
            _OUT.value,
            "peer_bench_startup.md"
            if _STARTUP.value == "compare"
            else "peer_bench.json",
        ),
        _OVERWRITE.value,
        "--overwrite",
    )
  if _UT_ONLY.value:
    print(json.dumps(dict(case=names[0], ut_ms=ut_only(build(names[0])))))
    return
  if _STARTUP.value == "compare":
    rows = compare_startups(names, _REPEATS.value)
    head = (
        f"ut step ms at the start-ups (fresh processes, medians of "
        f"{_REPEATS.value} interleaved rounds); jax {jax.__version__}; "
        f"2048^2 matmul {roofline_lib.rate(roofline_lib.make())[0] / 1e9:.0f}"
        " GFLOP/s"
    )
    print(head)
    print(reports.format_table(rows))
    if _OUT.value:
      os.makedirs(_OUT.value, exist_ok=True)
      reports.write_text(
          os.path.join(_OUT.value, "peer_bench_startup.md"),
          head + "\n\n" + reports.format_table(rows) + "\n",
      )
    return
  if torch is None:
    print(
        "PyTorch is not installed (pip install -e '.[bench]'): no torch column"
    )
  else:
    torch.manual_seed(0)
  roofline = roofline_lib.make()
  bandwidth = copy_bandwidth()
  rows = []
  for name in names:
    rows.append(measure(build(name), roofline, bandwidth))
    print(json.dumps(rows[-1]), flush=True)
  table = reports.format_table(rows)
  head = (
      f"copy bandwidth {bandwidth / 1e9:.1f} GB/s; medians of "
      f"{_REPEATS.value} rounds of {_STEPS.value} steps, interleaved; "
      f"jax {jax.__version__}, torch "
      f"{torch.__version__ if torch is not None else 'absent'}, "
      f"torch threads {torch.get_num_threads() if torch else '-'}"
  )
  print(head)
  print(table)
  if _OUT.value:
    os.makedirs(_OUT.value, exist_ok=True)
    reports.write_text(
        os.path.join(_OUT.value, "peer_bench.md"), head + "\n\n" + table + "\n"
    )
    reports.write_json(
        os.path.join(_OUT.value, "peer_bench.json"),
        dict(rows=rows, bandwidth=bandwidth, provenance=reports.provenance()),
    )


if __name__ == "__main__":
  app.run(main)
