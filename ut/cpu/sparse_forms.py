"""The sparse UT's forms under impl "xla_cpu", and when `apply` routes paths.

Shape glossary: B batch, T tokens (Q query rows), V vocabulary, C classes, H
heads, d sparse block width, F_j the width a sparse level holds.

`_apply_sparse` keeps the state as one array per level and folds the
parameter-free LayerNorm into what reads it; attention-only, where it is
fewer multiply-adds (`sparse_paths_form`), `_apply_sparse_paths` routes the
inputs along head strings instead, with no state wider than the root.
`spec` is duck-typed, as in `ut.cpu.forward`.
"""

import jax
import jax.numpy as jnp
import numpy as np

from ut.core.constructions import sparse
from ut.cpu import kernels


def sparse_string_costs(spec, num_tokens, last_only):
  """(paths, levels): the multiply-adds of one string through the
  attention-only sparse UT (d-wide blocks, H heads, L layers), the embedding
  and unembedding aside, in `_apply_sparse_paths` and in `_apply_sparse`.
  Paths: layer l reads the root's (1 + H) d columns off its P_l = (V + T) H^l
  rows (T P_l (1 + H) d), forms the scores (H T^2 d) and routes the rows
  (T^2 P_l H); the last reads level 1's H state blocks instead of routing.
  Levels: layer l forms the scores and routes the levels still nonzero,
  levels 1 .. L - l (T^2 F_j each), F_j = roles H^j d, except that from
  layer 1 on the deepest, level L - l, holds the state role alone (H^j d:
  what the leaves routed up). With last_only the last layer's queries are
  one row."""
  ut = spec.sparse_ut
  h, num_layers, d = ut.num_heads, ut.num_layers, ut.width
  t = num_tokens
  q = 1 if last_only else t
  widths = [
      sparse.level_roles(h, num_layers, j) * h**j * d
      for j in range(num_layers + 1)
  ]
  paths = levels = 0
  for layer in range(num_layers):
    rows = (spec.vocab_size + t) * h**layer
    last = layer == num_layers - 1
    paths += t * rows * (1 + h) * d
    if last:
      paths += h * q * t * d + t * rows * h * d + q * t * h * d
    else:
      paths += h * t * t * d + t * t * rows * h
    deepest = num_layers - layer
    routed = sum(widths[1:deepest]) + (
        widths[deepest] if layer == 0 else h**deepest * d
    )
    levels += (q if last else t) * t * (h * d + routed)
  return paths, levels


def sparse_paths_form(spec, num_tokens, last_only):
  """Whether `apply` computes the sparse kind by routing its inputs along
  head strings (`_apply_sparse_paths`): attention-only with no residual, and
  at most 1.2 times the multiply-adds of routing the levels
  (`sparse_string_costs`). The paths' few plain matmuls run faster per
  multiply-add than the levels' kernels; 1.2 is where the paths' training
  step broke even between the protocols' sizes measured on one core
  (benchmarks/paths_bench.py): faster at k-hop k = 2 and 3, slower on Dyck
  (T = 61), which this rule leaves to the levels."""
  if spec.kind != "sparse" or spec.variant != "attn" or spec.residual:
    return False
  paths, levels = sparse_string_costs(spec, num_tokens, last_only)
  return 5 * paths <= 6 * levels


def _levels(ut, w, axis=-1):
  """w's axis of width m (in the sparse block order) as one part per level."""
  return [
      jax.lax.slice_in_dim(w, s.start, s.stop, axis=axis % w.ndim)
      for s in sparse.level_slices(ut)
  ]


def _route_levels(
    ut, levels, *, causal, precision, stats=None, last_only=False
):
  """`sparse.route_levels` with the kernels, and LayerNorm folded in.

  The same routing (`sparse.root_queries_keys`, `sparse.children_by_head`),
  with the attention laid out as (B, T, T H), columns (s, g), so that each
  level is one batched matmul against its (B, T H, F_j / H) reshape. With
  stats = (mean, inv) from `kernels.level_stats` it routes the LayerNorm of the
  levels without forming it: A LN(z) = (A diag(inv)) z - A (mean inv) 1^T.
  With last_only only the last row's queries attend (to every row): the new
  levels are (B, 1, F_j).
  """
  h = ut.num_heads
  b, t = levels[0].shape[:2]
  root = levels[0] if stats is None else (levels[0] - stats[0]) * stats[1]
  q_BxHxQxd, k_BxHxTxd = sparse.root_queries_keys(ut, root)
  if last_only:
    q_BxHxQxd = q_BxHxQxd[:, :, -1:]
  a_BxHxQxT = kernels.attention_weights(
      q_BxHxQxd, k_BxHxTxd, causal=causal, precision=precision
  )
  q = a_BxHxQxT.shape[2]
  a_BxTxTxH = a_BxHxQxT.transpose(0, 2, 3, 1)  # T: the Q query rows.
  shift_BxTx1 = 0.0
  if stats is not None:
    mean_BxTx1, inv_BxTx1 = stats
    shift_BxTx1 = jnp.einsum(
        "btsh,bs->bt",
        a_BxTxTxH,
        (mean_BxTx1 * inv_BxTx1)[..., 0],
        precision=precision,
    )[..., None]
    a_BxTxTxH = a_BxTxTxH * inv_BxTx1[:, None]
  routed = [j for j in range(ut.num_layers) if levels[j + 1] is not None]
  # Split, then merge: a reshape that does both fails on sharded (swept) runs.
  out = kernels.batched_matmul(
      a_BxTxTxH.reshape(b, q, t * h),
      [
          sparse.children_by_head(levels[j + 1], h).reshape(b, t * h, -1)
          for j in routed
      ],
      precision,
  )
  new = {j: o - shift_BxTx1 for j, o in zip(routed, out)}
  return [new.get(j) for j in range(ut.num_layers)] + [None]


def _mlp(mlp, levels, precision):
  """z + MLP(LN(z)) on the levels' concatenation, split back into levels.

  The MLP reads and writes every level, so it runs on their concatenation:
  one matmul each way instead of one per level, and the LayerNorm of the whole
  state in one pass; LN(z) W1 is `kernels.normed_matmul`, with no normalised
  copy of z.
  """
  z = jnp.concatenate(levels, axis=-1)
  hidden = jax.nn.gelu(
      kernels.normed_matmul(
          [z], [mlp["w1"]], kernels.level_stats([z]), precision
      )
      + mlp["b1"][None, None]
  )
  z = (
      z
      + jnp.einsum("btf,fm->btm", hidden, mlp["w2"], precision=precision)
      + mlp["b2"][None, None]
  )
  return jnp.split(z, np.cumsum([zj.shape[-1] for zj in levels])[:-1], axis=-1)


def _apply_sparse_paths(params, spec, tokens_BxT, precision, last_only=False):
  """`apply` for the attention-only sparse kind: `sparse.sparse_apply` with
  order "paths" on X = [one_hot(token), one_hot(position)] and
  E = [E_token; E_position] (no state wider than the root is built).

  Without residuals only the root's state block is left after the last
  layer, so the logits are its output times U's first d rows.
  """
  ut = spec.sparse_ut
  embed = params["embed"]
  b, t = tokens_BxT.shape
  dtype = embed["token"].dtype
  x_BxTxD = jnp.concatenate(
      [
          jax.nn.one_hot(tokens_BxT, embed["token"].shape[0], dtype=dtype),
          jnp.broadcast_to(jnp.eye(t, dtype=dtype), (b, t, t)),
      ],
      axis=-1,
  )
  y_BxTxd = sparse.sparse_apply(
      ut,
      jnp.concatenate([embed["token"], embed["position"][:t]], axis=0),
      x_BxTxD,
      causal=spec.causal,
      residual=False,
      precision=precision,
      last_only=last_only,
  )
  return jnp.einsum(
      "btd,dc->btc",
      y_BxTxd,
      params["unembed"][: ut.width],
      precision=precision,
  )


def _apply_sparse(params, spec, tokens_BxT, precision, last_only=False):
  """`apply` for the sparse kind with the state kept as one array per level.

  No m-wide array is sliced or concatenated per layer, and in the block order
  of `sparse` routing moves no data but the matmuls'. The parameter-free
  LayerNorm is folded into what reads it (`_route_levels`,
  `kernels.normed_matmul`): no normalised copy of the m-wide state is formed
  (the sparse step is memory-bound). With last_only the last layer routes
  into the last row alone, and each level keeps that row from there on.
  """
  ut = spec.sparse_ut
  h = ut.num_heads
  t = tokens_BxT.shape[1]
  z = [
      kernels.token_embed(tokens_BxT, e, precision) + p[:t][None]
      for e, p in zip(
          _levels(ut, params["embed"]["token"]),
          _levels(ut, params["embed"]["position"]),
      )
  ]
  ln = spec.variant != "attn"
  for layer in range(spec.num_layers):
    last = last_only and layer == spec.num_layers - 1
    new = _route_levels(
        ut,
        z,
        causal=spec.causal,
        precision=precision,
        stats=kernels.level_stats(z) if ln else None,
        last_only=last,
    )
    if last:
      z = [None if zj is None else zj[:, -1:] for zj in z]
    if spec.residual:
      z = [
          zj if n is None else zj + sparse.pad_roles(n, zj.shape[-1], h**j)
          for j, (zj, n) in enumerate(zip(z, new))
      ]
    else:
      z = new
    if spec.variant == "res_ln_mlp":
      z = _mlp(jax.tree.map(lambda w: w[layer], params["mlp"]), z, precision)
  rows = _levels(ut, params["unembed"], axis=0)
  if ln:
    return kernels.normed_matmul(z, rows, kernels.level_stats(z), precision)
  # Without residuals only level 0 is left, narrowed to its state block.
  return sum(
      jnp.einsum("btm,mc->btc", zj, u[: zj.shape[-1]], precision=precision)
      for zj, u in zip(z, rows)
      if zj is not None
  )
