"""Simulate-check: run a fixed UT on compiled programs and compare with the targets.

Shape glossary: G targets checked at once, B inputs per target, T tokens,
d target width, m UT width, O output width.

`check` is jitted and vmapped over G targets (and their programs and inputs). The
UT runs in float32 and float64; the reference is the target run in float64.
  max_abs_err = max |UT(X, E) - T(X)|,   max_rel_err = max_abs_err / max |T(X)|.

Sizes are static in a compiled program, so a check of a new (H, L, m) compiles
anew. Given a `Padding`, `check` runs both networks zero-padded to its sizes
instead (`forward_padded`), and checks of any classes that fit one `Padding`
share one compiled program per network and dtype (`paddings` groups the classes
of a grid). What it checks, random targets and the UT built for each, comes
from `ut.core.instances`.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import targets as targets_lib
from ut.core import transformer
from ut.core.constructions import sparse


DTYPES = ("float32", "float64")

# A check runs a few inputs through programs that are large to compile and
# quick to run: on CPU, XLA's LLVM backend at optimization level 0 cuts their
# compile time by about a third, for a run a little slower (most of it is in
# dot library calls). `benchmarks/simulate_bench.py --baseline` times it.
CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}


def _check_jit(**jit_kwargs):
  """`jax.jit` with CPU_COMPILER_OPTIONS where the default backend is CPU,
  XLA's defaults elsewhere (where the option would slow the kernels it
  compiles). The default backend decides, not the inputs' devices: on a host
  with an accelerator, checks placed on its CPU get the defaults (speed only;
  the results are the same)."""

  def wrap(fn):
    jitted = {}

    @functools.wraps(fn)
    def call(*args, **kwargs):
      backend = jax.default_backend()
      if backend not in jitted:
        options = CPU_COMPILER_OPTIONS if backend == "cpu" else None
        jitted[backend] = jax.jit(fn, compiler_options=options, **jit_kwargs)
      return jitted[backend](*args, **kwargs)

    return call

  return wrap


def ut_apply(ut, program, x_BxTxD, *, num_layers, causal, residual):
  """UT(X, E): the structured path for a `SparseUT`, the dense forward otherwise."""
  if isinstance(ut, sparse.SparseUT):
    return sparse.sparse_apply(
        ut,
        program["embed"],
        x_BxTxD,
        causal=causal,
        residual=residual,
        readout=program["readout"],
    )
  params = dict(ut, embed=program["embed"], readout=program["readout"])
  return transformer.forward(
      params, x_BxTxD, num_layers=num_layers, causal=causal, residual=residual
  )


@_check_jit(static_argnames=("num_layers", "causal", "residual"))
def batched_ut(ut, programs, x_GxBxTxD, *, num_layers, causal, residual):
  """UT outputs for G programs at once: (G, B, T, O)."""
  fn = functools.partial(
      ut_apply, ut, num_layers=num_layers, causal=causal, residual=residual
  )
  return jax.vmap(fn)(programs, x_GxBxTxD)


@_check_jit()
def batched_target(targets, x_GxBxTxD):
  """Target outputs for G stacked targets: (G, B, T, O)."""
  return jax.vmap(targets_lib.apply)(targets, x_GxBxTxD)


def _cast(tree, dtype):
  return jax.tree.map(
      lambda a: np.asarray(a, dtype)
      if np.issubdtype(np.asarray(a).dtype, np.floating)
      else a,
      tree,
  )


def errors(y, ref):
  """(max_abs_err, max_rel_err) of y against ref, in float64."""
  diff = np.abs(np.asarray(y, np.float64) - np.asarray(ref, np.float64))
  max_abs = float(diff.max())
  return max_abs, max_abs / max(
      float(np.abs(ref).max()), np.finfo(np.float64).tiny
  )


def stack(trees):
  """Stacks a list of equal-structure pytrees along a new leading axis. One
  tree is not copied: its leaves get a leading axis of 1 as read-only views
  of the caller's arrays (the scale run's E is 134 MB); several are copied
  into new, writable arrays."""
  if len(trees) == 1:
    return jax.tree.map(_leading_view, trees[0])
  return jax.tree.map(lambda *a: np.stack(a), *trees)


def _leading_view(a):
  view = np.asarray(a)[None]
  view.flags.writeable = False
  return view


class Padding(NamedTuple):
  """Sizes a check is zero-padded to, so that checks of many classes share
  its compiled programs.

  num_layers L' >= L, num_heads H' >= H, ut_width m' >= m, and width >= every
  narrow size: d, the head widths k, kv and k_u, and d_out. Zero padding is
  exact: zero heads add zero, zero columns stay zero in every layer, layers
  past L are computed and dropped, and scores are scaled by 1/sqrt(k) of the
  unpadded k (`forward_padded`).
  """

  num_layers: int
  num_heads: int
  width: int
  ut_width: int


def paddings(classes, *, min_width=256):
  """A `Padding` for each (H, L, d, m) in `classes`, shared where it is cheap.

  Classes whose m rounds up to the same power of two, at least `min_width`,
  share one: their largest L, H, d and m. Up to min_width a padded forward
  costs less than compiling another, so a grid of small classes compiles one
  program per network and dtype.
  """

  def group(entry):
    return max(min_width, 2 ** math.ceil(math.log2(entry[3])))

  largest = {}
  for entry in classes:
    old = largest.get(group(entry), entry)
    largest[group(entry)] = tuple(max(a, b) for a, b in zip(old, entry))
  return [
      Padding(num_layers, h, d, m)
      for h, num_layers, d, m in (largest[group(e)] for e in classes)
  ]


def head_scale(head_width, dtype):
  """1/sqrt(k) in `dtype`, as `transformer.attention_weights` computes it."""
  return np.asarray(1, dtype) / np.sqrt(np.asarray(head_width, dtype))


def forward_padded(params, x_BxTxD, num_layers, scale, *, causal, residual):
  """`transformer.forward` on zero-padded weights, with sizes as data.

  params: as for `transformer.forward`, with L' stacked layers (a looped stack
  repeated L' deep). The first `num_layers` (an int array) run; the others are
  computed and dropped (a select: exact). Scores are scaled by `scale` (an
  array, `head_scale` of the unpadded head width), not by 1/sqrt of the padded
  one (`transformer.attention_layer`'s `scale`). So one compiled
  program serves every L <= L' and every width that pads to params'. Returns
  (B, T, O).
  """
  hi = transformer.HIGHEST
  x = x_BxTxD
  if params.get("embed") is not None:
    x = jnp.einsum("btd,dw->btw", x, params["embed"], precision=hi)

  def layer(x, weights):
    index, wq, wk, wv, wo = weights
    out = transformer.attention_layer(
        x, wq, wk, wv, wo, causal=causal, precision=hi, scale=scale
    )
    return jnp.where(index < num_layers, x + out if residual else out, x), None

  stack = (params["wq"], params["wk"], params["wv"], params.get("wo"))
  x, _ = jax.lax.scan(layer, x, (jnp.arange(len(stack[0])),) + stack)
  for name in ("unembed", "readout"):
    if params.get(name) is not None:
      x = jnp.einsum("btw,wo->bto", x, params[name], precision=hi)
  return x


@_check_jit(static_argnames=("causal", "residual"))
def batched_ut_padded(
    ut, programs, x_GxBxTxD, num_layers, scale, *, causal, residual
):
  """`batched_ut` for a UT padded by `pad_ut`: (G, B, T, O')."""

  def one(program, x):
    params = dict(ut, embed=program["embed"], readout=program["readout"])
    return forward_padded(
        params, x, num_layers, scale, causal=causal, residual=residual
    )

  return jax.vmap(one)(programs, x_GxBxTxD)


@_check_jit(static_argnames=("causal", "residual"))
def batched_target_padded(
    params, x_GxBxTxD, num_layers, scale, *, causal, residual
):
  """`batched_target` for targets padded by `pad_targets`: (G, B, T, O')."""
  return jax.vmap(
      lambda p, x: forward_padded(
          p, x, num_layers, scale, causal=causal, residual=residual
      )
  )(params, x_GxBxTxD)


def _pad(a, shape):
  """Zero-pads every axis of `a` at its end to `shape`."""
  a = np.asarray(a)
  if any(n > s for n, s in zip(a.shape, shape)):
    raise ValueError(
        f"cannot pad shape {a.shape} to {shape}: the padding is too small"
    )
  return np.pad(a, [(0, s - n) for n, s in zip(a.shape, shape)])


def pad_ut(ut, padding, *, num_layers):
  """A UT of `num_layers` layers as float64 `forward_padded` params (wq, wk,
  wv, unembed), padded.

  A `SparseUT` becomes its {0, 1} matrices (`sparse.to_dense`); a looped UT
  (one weight layer) is repeated into every layer. Returns (params, k_u).
  """
  if isinstance(ut, sparse.SparseUT):
    ut = sparse.to_dense(ut, np.float64)
  if set(ut) != {"wq", "wk", "wv", "unembed"}:
    raise ValueError(f"a UT has wq, wk, wv and unembed; got {sorted(ut)}")
  ut = {key: np.asarray(a, np.float64) for key, a in ut.items()}
  lp = ut["wq"].shape[0]
  if lp not in (1, num_layers):
    raise ValueError(
        f"weights stack {lp} layers; expected 1 (looped) or "
        f"num_layers={num_layers}"
    )
  num_layers, h, w, m = padding
  if lp == 1:
    ut.update(
        {k: np.repeat(ut[k], num_layers, axis=0) for k in ("wq", "wk", "wv")}
    )
  params = dict(
      wq=_pad(ut["wq"], (num_layers, h, m, w)),
      wk=_pad(ut["wk"], (num_layers, h, m, w)),
      wv=_pad(ut["wv"], (num_layers, h, m, m)),
      unembed=_pad(ut["unembed"], (m, w)),
  )
  return params, ut["wq"].shape[-1]


def pad_targets(targets, padding):
  """G stacked targets as `forward_padded` params, padded. Returns (params, k)."""
  num_layers, h, w, _ = padding
  g = np.shape(targets.wq)[0]
  params = dict(
      wq=_pad(targets.wq, (g, num_layers, h, w, w)),
      wk=_pad(targets.wk, (g, num_layers, h, w, w)),
      wv=_pad(targets.wv, (g, num_layers, h, w, w)),
      wo=_pad(targets.wo, (g, num_layers, h, w, w)),
      readout=_pad(targets.wu, (g, w, w)),
  )
  return params, np.shape(targets.wq)[-1]


def check(ut, programs, targets, x_GxBxTxD, *, dtypes=DTYPES, padding=None):
  """Runs the UT on G stacked programs and compares with G stacked targets.

  padding: a `Padding`, to run both networks padded to its sizes (one compiled
  program per network and dtype for every class that fits it; a `SparseUT`
  then runs as its dense matrices), or None for the networks as they are.
  Returns {dtype: dict(max_abs_err, max_rel_err, output)} and the float64
  reference under "reference".
  """
  first = jax.tree.map(lambda a: a[0], targets)
  kw = dict(causal=first.causal, residual=first.residual)
  if padding is None:

    def run_target(x):
      return batched_target(_cast(targets, np.float64), x)

    def run_ut(dtype, x):
      return batched_ut(
          _cast(ut, dtype),
          _cast(programs, dtype),
          x,
          num_layers=first.num_layers,
          **kw,
      )

  else:
    if (
        padding.num_layers < first.num_layers
        or padding.num_heads < first.num_heads
    ):
      raise ValueError(
          f"{padding} is smaller than the targets' (L, H) = "
          f"({first.num_layers}, {first.num_heads})"
      )
    num_layers = np.int32(first.num_layers)
    g, w, out_width = len(targets.wu), padding.width, first.out_width
    padded_targets, k = pad_targets(targets, padding)
    padded_ut, k_u = pad_ut(ut, padding, num_layers=first.num_layers)
    padded_programs = dict(
        embed=_pad(programs["embed"], (g, w, padding.ut_width)),
        readout=_pad(programs["readout"], (g, w, w)),
    )

    def run_target(x):
      y = batched_target_padded(
          _cast(padded_targets, np.float64),
          _pad(x, x.shape[:-1] + (w,)),
          num_layers,
          head_scale(k, np.float64),
          **kw,
      )
      return np.asarray(y)[..., :out_width]

    def run_ut(dtype, x):
      y = batched_ut_padded(
          _cast(padded_ut, dtype),
          _cast(padded_programs, dtype),
          _pad(x, x.shape[:-1] + (w,)),
          num_layers,
          head_scale(k_u, dtype),
          **kw,
      )
      return np.asarray(y)[..., :out_width]

  with jax.enable_x64(True):
    ref = np.asarray(run_target(np.asarray(x_GxBxTxD, np.float64)))
    result = {"reference": ref}
    for dtype in dtypes:
      y = np.asarray(run_ut(dtype, np.asarray(x_GxBxTxD, dtype)))
      max_abs, max_rel = errors(y, ref)
      result[dtype] = dict(max_abs_err=max_abs, max_rel_err=max_rel, output=y)
  return result
