"""The training models' forward pass restructured for XLA CPU (impl "xla_cpu").

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width, H
heads, K head width, F_j the width a sparse level holds, d sparse block width.

`apply` computes what `ut.training.models.apply` computes with impl "reference"
(the tests check them equal, gradients included), with the same parameters,
but:
  - every op comes from `kernels` (custom VJPs, LayerNorm row sums as matmuls);
  - the random UT's first layer is computed from the embedding tables
    (`_random_first_layer`), and the attention-only random UT without any
    M-wide state where that is less work (`_random_attn_coefficients`,
    in `ut.cpu.coefficients` with the res_ln form and their rules);
  - the sparse UT keeps its state as one array per level and folds the
    parameter-free LayerNorm into what reads it (`_apply_sparse`);
    attention-only, where it is fewer multiply-adds (`sparse_paths_form`), it
    routes the inputs along head strings instead, with no state wider than
    the root (`_apply_sparse_paths`; both in `ut.cpu.sparse_forms`).

`spec` is duck-typed (this package never imports the training code): it needs
kind ("sparse" | "random" | "trained"), variant ("attn" | "res_ln" |
"res_ln_mlp"), residual, num_layers, num_heads, model_width, causal,
vocab_size, and for the sparse kind sparse_ut (a
`ut.core.constructions.sparse.SparseUT`).
"""

import jax
import jax.numpy as jnp

from ut.core import transformer
from ut.cpu import coefficients
from ut.cpu import kernels
from ut.cpu import sparse_forms
from ut.cpu.coefficients import coefficient_form
from ut.cpu.coefficients import is_split
from ut.cpu.coefficients import residual_coefficient_form
from ut.cpu.sparse_forms import sparse_paths_form

# The forms' bodies live beside their rules; `apply` is the one caller.
# pylint: disable=protected-access


def apply(params, spec, tokens_BxT, precision=None, last_only=False):
  """Logits (B, T, C) for token ids (B, T); with last_only, (B, 1, C), the
  last row's, with the last layer's queries, attention output, residual, MLP
  and unembedding computed for that row alone (its keys and values from every
  row; the last row sees every position, so it has no causal mask)."""
  if spec.kind == "sparse":
    if sparse_paths_form(spec, tokens_BxT.shape[1], last_only):
      return sparse_forms._apply_sparse_paths(
          params, spec, tokens_BxT, precision, last_only
      )
    return sparse_forms._apply_sparse(
        params, spec, tokens_BxT, precision, last_only
    )
  if coefficient_form(spec, tokens_BxT.shape[1]):
    return coefficients._random_attn_coefficients(
        params, spec, tokens_BxT, precision, last_only
    )
  if residual_coefficient_form(spec, *tokens_BxT.shape, last_only):
    return coefficients._random_residual_coefficients(
        params, spec, tokens_BxT, precision, last_only
    )
  if is_split(params["layers"]):
    raise ValueError(
        "split layers (`split_layers`) serve the coefficient form only; "
        "pass the stacked layers"
    )
  return apply_m_wide(params, spec, tokens_BxT, precision, last_only)


def apply_m_wide(params, spec, tokens_BxT, precision=None, last_only=False):
  """`apply` for the random and trained kinds, layer by layer on the M-wide
  state: every case but `coefficient_form`'s (callable for those too, as
  the baseline of benchmarks/last_only_bench.py and of the tests)."""
  t = tokens_BxT.shape[1]
  z = (
      kernels.token_embed(tokens_BxT, params["embed"]["token"], precision)
      + params["embed"]["position"][:t][None]
  )
  ln = spec.variant != "attn"
  for layer in range(spec.num_layers):
    last = last_only and layer == spec.num_layers - 1
    if layer == 0 and spec.kind == "random":
      a = _random_first_layer(params, spec, tokens_BxT, z, precision, last)
    else:
      x = kernels.layer_norm(z) if ln else z
      a = kernels.attention_layer(
          x,
          *transformer.layer_params(params["layers"], layer),
          causal=spec.causal,
          precision=precision,
          x_query=x[:, -1:] if last else None,
      )
    if last:
      z = z[:, -1:]
    z = z + a if spec.residual else a
    if spec.variant == "res_ln_mlp":
      mlp = jax.tree.map(lambda w: w[layer], params["mlp"])
      hidden = jax.nn.gelu(
          jnp.matmul(kernels.layer_norm(z), mlp["w1"], precision=precision)
          + mlp["b1"][None, None]
      )
      z = (
          z
          + jnp.matmul(hidden, mlp["w2"], precision=precision)
          + mlp["b2"][None, None]
      )
  if ln:
    z = kernels.layer_norm(z)
  return kernels.unembed(z, params["unembed"], precision)


def _random_first_layer(
    params, spec, tokens_BxT, z_BxTxM, precision, last_only=False
):
  """Layer 1 of the random UT (no residual), from the tables; with last_only
  (a one-layer UT's last layer) the last row's only, (B, 1, M).

  Its input z = E_tok[x] + E_pos[t] has V + T distinct rows. With
  P_h = E_pos wv_h and R_h = E_tok wv_h,
    sum_h A_h z wv_h = sum_h A_h P_h[:T] + sum_h (A_h onehot) R_h,
  and with res_ln LN(z) wv_h = inv (z wv_h - mean 1^T wv_h): A_h is scaled by
  inv along its columns and gets one more token column, mean, whose row is
  -1^T wv_h. Both sums are one 2-D matmul: rows (b, t) and columns
  (h, [s, v]) of [A_h, A_h onehot], (B T) x H (T + V'), against the rows
  (h, [s, v]) of [P_h; R_h]. So (V + T) M^2 H FLOPs make the tables instead
  of B T M^2 H the values (the layer's largest matmul), the values
  (B, T, H, M) are never formed, the product is one matmul instead of B small
  ones, and the position table's gradient is a matmul, not a reduce over the
  batch.
  """
  b, s = tokens_BxT.shape
  v = spec.vocab_size
  wq, wk, wv, _ = transformer.layer_params(params["layers"], 0)
  ln = spec.variant != "attn"
  stats = kernels.level_stats([z_BxTxM]) if ln else None
  x_BxTxM = (z_BxTxM - stats[0]) * stats[1] if ln else z_BxTxM
  # T query rows (1 with last_only) against S = every row's keys and values.
  a_BxHxTxS = kernels.attention_maps(
      x_BxTxM,
      wq,
      wk,
      causal=spec.causal,
      precision=precision,
      x_query=x_BxTxM[:, -1:] if last_only else None,
  )
  t = a_BxHxTxS.shape[2]
  cols_BxSxV = jax.nn.one_hot(tokens_BxT, v, dtype=z_BxTxM.dtype)
  rows_HxVxM = jnp.einsum(
      "vm,hmn->hvn", params["embed"]["token"], wv, precision=precision
  )
  if ln:
    mean_BxSx1, inv_BxSx1 = stats
    a_BxHxTxS = a_BxHxTxS * inv_BxSx1[:, None, None, :, 0]
    cols_BxSxV = jnp.concatenate([cols_BxSxV, mean_BxSx1], axis=-1)
    rows_HxVxM = jnp.concatenate([rows_HxVxM, -wv.sum(1)[:, None]], axis=1)
  pos_HxSxM = jnp.einsum(
      "sm,hmn->hsn", params["embed"]["position"][:s], wv, precision=precision
  )
  c_BxTxHxV = jnp.einsum(
      "bhts,bsv->bthv", a_BxHxTxS, cols_BxSxV, precision=precision
  )
  # One merge per reshape: a reshape that merges two pairs of axes fails on
  # sharded (swept) runs.
  lhs = (
      jnp.concatenate([a_BxHxTxS.transpose(0, 2, 1, 3), c_BxTxHxV], axis=-1)
      .reshape(b, t, -1)
      .reshape(b * t, -1)
  )
  rhs = jnp.concatenate([pos_HxSxM, rows_HxVxM], axis=1)
  return kernels.batched_matmul(
      lhs, rhs.reshape(-1, rhs.shape[-1]), precision
  ).reshape(b, t, -1)
