"""Simulate-check: run a fixed UT on compiled programs and compare with the targets.

Shape glossary: G targets checked at once, B inputs per target, T tokens,
d target width, m UT width, O output width.

`check` is jitted and vmapped over G targets (and their programs and inputs). The
UT runs in float32 and float64; the reference is the target run in float64.
  max_abs_err = max |UT(X, E) - T(X)|,   max_rel_err = max_abs_err / max |T(X)|.
"""

import functools
import warnings

from absl import logging
import jax
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import targets as targets_lib
from ut.core import transformer
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError

DTYPES = ("float32", "float64")


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


@functools.partial(
    jax.jit, static_argnames=("num_layers", "causal", "residual")
)
def batched_ut(ut, programs, x_GxBxTxD, *, num_layers, causal, residual):
  """UT outputs for G programs at once: (G, B, T, O)."""
  fn = functools.partial(
      ut_apply, ut, num_layers=num_layers, causal=causal, residual=residual
  )
  return jax.vmap(fn)(programs, x_GxBxTxD)


@jax.jit
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
  """Stacks a list of equal-structure pytrees along a new leading axis."""
  return jax.tree.map(lambda *a: np.stack(a), *trees)


def check(ut, programs, targets, x_GxBxTxD, *, dtypes=DTYPES):
  """Runs the UT on G stacked programs and compares with G stacked targets.

  Returns {dtype: dict(max_abs_err, max_rel_err, output)} and the float64
  reference under "reference".
  """
  first = jax.tree.map(lambda a: a[0], targets)
  kw = dict(
      num_layers=first.num_layers, causal=first.causal, residual=first.residual
  )
  with jax.enable_x64(True):
    ref = np.asarray(
        batched_target(
            _cast(targets, np.float64), np.asarray(x_GxBxTxD, np.float64)
        )
    )
    result = {"reference": ref}
    for dtype in dtypes:
      y = np.asarray(
          batched_ut(
              _cast(ut, dtype),
              _cast(programs, dtype),
              np.asarray(x_GxBxTxD, dtype),
              **kw,
          )
      )
      max_abs, max_rel = errors(y, ref)
      result[dtype] = dict(max_abs_err=max_abs, max_rel_err=max_rel, output=y)
  return result


# ---------------------------------------------------------------------------
# Experiments driven by configs/simulate.py.


def _build_sparse(target, *, seed, m, k_u, shared):
  del seed, m, k_u, shared  # The sparse UT depends on (H, L, d) only.
  ut = sparse.make_sparse_ut(target.num_heads, target.num_layers, target.width)
  program, report = compile_lib.compile_sparse(ut, target)
  return ut, program, report


def _build_random(target, *, seed, m, k_u, shared):
  d = target.width
  k_u = d if k_u is None else k_u
  if k_u < d:
    raise UserError(
        f"k_u={k_u} is smaller than the target width d={d}; use "
        f"--config.k_u={d} or larger"
    )
  n = bounds.random_threshold(
      target.num_heads,
      target.num_layers,
      d,
      k_u,
      d,
      residual=target.residual,
      shared=shared and target.residual,
  )
  ut = gaussian.make_gaussian_ut(
      target.num_heads,
      target.num_layers,
      n if m is None else m,
      k_u,
      seed,
      out_width=d,
      shared=shared,
  )
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    program, report = compile_lib.compile_random(ut, target)
  for w in caught:
    logging.warning("%s", w.message)
  return ut, program, report


CONSTRUCTIONS = {"sparse": _build_sparse, "random": _build_random}


def build(target, construction, *, seed=0, m=None, k_u=None, shared=False):
  """Builds a UT and compiles the target: (ut, program, CompileReport).

  m (random only) defaults to N; k_u defaults to the target width d.
  """
  if construction not in CONSTRUCTIONS:
    raise UserError(
        f"unknown construction ut={construction!r}; use one of "
        f"{sorted(CONSTRUCTIONS)}"
    )
  if construction == "sparse" and (m is not None or k_u is not None):
    raise UserError(
        "the sparse UT's width is fixed by (H, L, d); drop "
        "--config.m and --config.k_u, or use --config.ut=random"
    )
  return CONSTRUCTIONS[construction](
      target, seed=seed, m=m, k_u=k_u, shared=shared
  )
