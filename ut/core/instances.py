"""The instances a simulate-check runs (configs/simulate.py): random targets,
and the UT built and compiled for each (`simulate.check` then runs them).
"""

import math
import warnings

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import targets as targets_lib
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError

# Normals drawn per weight at least: one compiled draw for small classes.
_MIN_DRAW = 256


def random_targets(num_heads, num_layers, width, *, num, seed, causal=True):
  """`num` generic float64 targets: for i < num, bit for bit,

    targets.init(fold_in(PRNGKey(seed), i), num_heads=..., num_layers=...,
                 width=..., causal=causal).astype(np.float64).

  `targets.init` compiles its draws for each shape; here one compiled draw of
  at least _MIN_DRAW normals per weight serves every class: with JAX's
  partitionable threefry (the default) a normal array is the flat draw of its
  size, reshaped, and a draw of n is the first n of any longer one.
  """
  h, d = num_heads, width
  targets_lib.check_positive(H=h, L=num_layers, d=d)
  key = jax.random.PRNGKey(seed)
  if not (
      jax.config.jax_threefry_partitionable
      and jax.config.jax_default_prng_impl == "threefry2x32"
  ):
    return [
        targets_lib.init(
            jax.random.fold_in(key, i),
            num_heads=h,
            num_layers=num_layers,
            width=d,
            causal=causal,
        ).astype(np.float64)
        for i in range(num)
    ]
  shape = (num_layers, h, d, d)  # wq, wk, wv, wo: k = kv = d.
  size = math.prod(shape)
  draw = max(_MIN_DRAW, 2 ** math.ceil(math.log2(size)))
  fan_ins = (d, d, d, d * h)
  gens = []
  for i in range(num):
    # As targets.init splits, draws and divides (the same operations, rounding
    # included): each weight from its own key, by sqrt(fan-in) in float32.
    keys = np.asarray(jax.random.split(jax.random.fold_in(key, i), 5))
    weights = [
        np.asarray(
            jax.random.normal(k, (draw,), jnp.float32)
            / np.sqrt(fan_in).astype(np.float32)
        )
        for k, fan_in in zip(keys, fan_ins)
    ]
    gens.append(
        targets_lib.Target(
            *(w[:size].reshape(shape) for w in weights),
            wu=np.eye(d, dtype=np.float32),
            causal=causal,
        ).astype(np.float64)
    )
  return gens


def random_instances(num_heads, num_layers, width, *, num, seed, batch,
                     seq_len, causal=True):
  """(`random_targets`, inputs x_GxBxTxD): `num` targets and, for each, a
  batch of standard normal inputs from numpy's default_rng(seed). The
  simulation table and the threshold curve check their UTs on these."""
  targets = random_targets(
      num_heads, num_layers, width, num=num, seed=seed, causal=causal
  )
  rng = np.random.default_rng(seed)
  return targets, rng.standard_normal((num, batch, seq_len, width))


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
