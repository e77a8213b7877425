"""The training models' forward pass restructured for XLA CPU (impl "xla_cpu").

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width, H
heads, K head width, F_j the width a sparse level holds, d sparse block width.

`apply` computes what `ut.training.models.apply` computes with impl "reference"
(the tests check them equal, gradients included), with the same parameters,
but:
  - every op comes from `kernels` (custom VJPs, LayerNorm row sums as matmuls);
  - the random UT's first layer is computed from the embedding tables
    (`_random_first_layer`), and the attention-only random UT without any
    M-wide state where that is less work (`_random_attn_coefficients`);
  - the sparse UT keeps its state as one array per level and folds the
    parameter-free LayerNorm into what reads it (`_apply_sparse`);
    attention-only, where it is fewer multiply-adds (`sparse_paths_form`), it
    routes the inputs along head strings instead, with no state wider than
    the root (`_apply_sparse_paths`).

`spec` is duck-typed (this package never imports the training code): it needs
kind ("sparse" | "random" | "trained"), variant ("attn" | "res_ln" |
"res_ln_mlp"), residual, num_layers, num_heads, model_width, causal,
vocab_size, and for the sparse kind sparse_ut (a
`ut.core.constructions.sparse.SparseUT`).
"""

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import transformer
from ut.core.constructions import sparse
from ut.cpu import kernels


def apply(params, spec, tokens_BxT, precision=None, last_only=False):
  """Logits (B, T, C) for token ids (B, T); with last_only, (B, 1, C), the
  last row's, with the last layer's queries, attention output, residual, MLP
  and unembedding computed for that row alone (its keys and values from every
  row; the last row sees every position, so it has no causal mask)."""
  if spec.kind == "sparse":
    if sparse_paths_form(spec, tokens_BxT.shape[1], last_only):
      return _apply_sparse_paths(params, spec, tokens_BxT, precision, last_only)
    return _apply_sparse(params, spec, tokens_BxT, precision, last_only)
  if coefficient_form(spec, tokens_BxT.shape[1]):
    return _random_attn_coefficients(
        params, spec, tokens_BxT, precision, last_only
    )
  if residual_coefficient_form(spec, *tokens_BxT.shape, last_only):
    return _random_residual_coefficients(
        params, spec, tokens_BxT, precision, last_only
    )
  if is_split(params["layers"]):
    raise ValueError(
        "split layers (`split_layers`) serve the coefficient form only; "
        "pass the stacked layers"
    )
  return apply_m_wide(params, spec, tokens_BxT, precision, last_only)


def split_layers(layers):
  """The frozen maps wq, wk, wv of a random UT's layers as one array per
  stack and head: a tuple (stacks) of tuples (heads), which the coefficient
  form reads in place of the stacked (Lp, H, M, N) arrays.

  XLA CPU copies a slice of a parameter before a dot reads it, so inside a
  jitted step every `wv[layer][head]` of a stacked array is a fresh M x M
  copy (33 MB at the learnability's M = 2880). Split once, outside the jit
  (eagerly: each piece its own buffer), and passed in as arguments, the
  pieces are read in place. Values and results are the same.
  """
  return {
      name: tuple(tuple(jnp.array(w) for w in stack) for stack in layers[name])
      for name in ("wq", "wk", "wv")
  }


def is_split(layers):
  """Whether `layers` is `split_layers`' form."""
  return isinstance(layers["wq"], tuple)


def _layer_maps(layers, layer):
  """(wq, wk, wv) of one layer, each a sequence over heads of (M, N) maps,
  from stacked or `split_layers` layers; looped stacks (Lp == 1) serve every
  layer."""
  if is_split(layers):
    idx = layer if len(layers["wq"]) > 1 else 0
    return tuple(layers[name][idx] for name in ("wq", "wk", "wv"))
  return transformer.layer_params(layers, layer)[:3]


def coefficient_widths(spec, num_tokens):
  """[P_l], the coefficient state that layer l of `_random_attn_coefficients`
  reads: its input is a mix of H^l (T + V) rows (layer 0's: the T + V
  embedding rows; the widest, layer L - 1's, H^(L-1) (T + V))."""
  return [
      (num_tokens + spec.vocab_size) * spec.num_heads**l
      for l in range(spec.num_layers)
  ]


def string_costs(spec, num_tokens):
  """(coefficient form, M-wide order): the multiply-adds of one string
  through an attention-only UT of spec's shape, tables and the unembedding
  aside. Per layer and head the M-wide order forms queries and keys (2 T M K),
  the scores (T^2 K), the values (T M^2) and their mix (T^2 M); the
  coefficient form reads queries and keys off its tables (2 T P_l K), forms
  the scores and mixes its P_l = (T + V) H^l coefficients (T^2 P_l)."""
  t, h, k, m = (
      num_tokens,
      spec.num_heads,
      spec.head_width,
      spec.model_width,
  )
  coefficient = sum(
      t * h * (2 * p * k + t * k + t * p)
      for p in coefficient_widths(spec, num_tokens)
  )
  m_wide = spec.num_layers * t * h * (2 * m * k + t * k + m * m + t * m)
  return coefficient, m_wide


def coefficient_form(spec, num_tokens):
  """Whether `apply` computes an attention-only random UT without an M-wide
  state (`_random_attn_coefficients`): no residual or LayerNorm, and a
  string costs at most half the multiply-adds of the M-wide order
  (`string_costs`; the form's many small ops run well below the M-wide
  order's matmul speed: its step was 1.8-3.4x faster at 6-22x fewer
  multiply-adds, docs/performance.md). The tables
  it builds from E (about P M^2 H for each layer but the last) are paid once
  a call, so it is less work in all when a call holds many strings (every
  training batch of our protocols; not a single short string at L >= 3).
  Dyck's random UT (L = 2, T = 61, V = 4: P up to 130) from m = 128 on;
  k-hop's at k = 2 and 3 (m = 256: P up to 148 and 296) and the
  learnability's (m = 2880)."""
  if not (
      spec.kind == "random" and spec.variant == "attn" and not spec.residual
  ):
    return False
  coefficient, m_wide = string_costs(spec, num_tokens)
  return 2 * coefficient <= m_wide


def residual_coefficient_widths(spec, num_tokens):
  """[P_l], the coefficient state that layer l of
  `_random_residual_coefficients` reads: (T + V) (1 + H)^l rows (each layer
  adds H heads' mixes to the residual's)."""
  return [
      (num_tokens + spec.vocab_size) * (1 + spec.num_heads) ** l
      for l in range(spec.num_layers)
  ]


def residual_costs(spec, batch_size, num_tokens, last_only=False):
  """(coefficient form, its per-row part, M-wide order): the multiply-adds
  of one call on a (B, T) batch through a random UT with res_ln, the
  embedding and the unembedding aside.

  Coefficient form (`_random_residual_coefficients`), layer l with
  P = P_l rows: the tables Rc wq, Rc wk, Rc wv (P M (2 K + M) H) and the
  Gram matrix (P^2 M); per row its variance (P^2) and key (P K H), per
  query row its query (P K H), scores and mix (T (K + P) H): the per-row
  part, many small matmuls over P-wide coefficients; then the last state,
  B Q (1 + H) P_{L-1} M. M-wide order (`apply_m_wide`): layer 1 from the
  tables ((T + V) M^2 H, and B Q H (T + V + 1) M to combine them), every
  later layer's mix and values, (A_h x) wv_h (B Q T M H and B Q M^2 H);
  layer 1's attention over the tokens and the mean, B Q T (V + 1) H; each
  layer's keys (B T M K H), queries (B Q M K H) and scores (B Q T K H). Q is
  T, or 1 in the last layer with last_only.
  """
  b, t, h, k, m = (
      batch_size,
      num_tokens,
      spec.num_heads,
      spec.head_width,
      spec.model_width,
  )
  widths = residual_coefficient_widths(spec, t)
  coefficient = rows = m_wide = 0
  for layer, p in enumerate(widths):
    q = 1 if last_only and layer == len(widths) - 1 else t
    coefficient += p * m * (2 * k + m) * h + p * p * m
    rows += b * t * p * p + b * (t + q) * p * k * h + b * q * t * (k + p) * h
    m_wide += b * (t + q) * m * k * h + b * q * t * k * h
    if layer == 0:
      v = spec.vocab_size
      m_wide += widths[0] * m * m * h + b * q * h * (widths[0] + 1) * m
      m_wide += b * q * t * (v + 1) * h
    else:
      m_wide += b * q * m * m * h + b * q * t * m * h
  q = 1 if last_only else t
  coefficient += rows + b * q * (1 + h) * widths[-1] * m
  return coefficient, rows, m_wide


# The coefficient form's per-row matmuls ran at about a fourth of its
# tables' rate: `residual_coefficient_form` counts them 4 times.
RESIDUAL_ROW_WEIGHT = 4


def residual_coefficient_form(spec, batch_size, num_tokens, last_only=False):
  """Whether `apply` computes a random UT with res_ln in coefficient form
  (`_random_residual_coefficients`): where its multiply-adds, the per-row
  part counted RESIDUAL_ROW_WEIGHT times, are at most 0.8 of the M-wide
  order's (`residual_costs`). Its tables are paid once a call, so it holds
  for wide UTs and large batches: k-hop's (batch 32 of 32 tokens) from
  m = 384 at k = 1 and m = 792 at k = 2 (benchmarked at 400 and 928), not
  the Dyck table's (m = 256, 61 tokens, most of its work per row). The weights come from
  benchmarks/residual_bench.py (docs/performance.md)."""
  if spec.kind != "random" or spec.variant != "res_ln":
    return False
  coefficient, rows, m_wide = residual_costs(
      spec, batch_size, num_tokens, last_only
  )
  weighted = coefficient + (RESIDUAL_ROW_WEIGHT - 1) * rows
  return 5 * weighted <= 4 * m_wide


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


def _head_rows(w_HxMxN, of, precision):
  """[R w_h]_h as (P, H, N), R the rows of the tables `of` stacked."""
  # A 2-D dot per head: the einsum "pm,hmn->phn" ran as a batched dot over
  # a broadcast R, and made the learnability's step (m = 2880) 1.6x slower.
  r_PxM = jnp.concatenate(of, axis=0) if len(of) > 1 else of[0]
  return jnp.stack(
      [jnp.dot(r_PxM, w, precision=precision) for w in w_HxMxN], axis=1
  )


def _project(lhs_BxSxP, r_PxHxK, precision):
  """lhs R w_h for every head, (B, H, S, K), from the rows (P, H, K)."""
  out = kernels.batched_matmul(
      lhs_BxSxP.reshape(-1, lhs_BxSxP.shape[-1]),
      r_PxHxK.reshape(r_PxHxK.shape[0], -1),
      precision,
  )
  return out.reshape(*lhs_BxSxP.shape[:2], *r_PxHxK.shape[1:]).transpose(
      0, 2, 1, 3
  )


def _random_attn_coefficients(
    params, spec, tokens_BxT, precision, last_only=False
):
  """The logits (B, T, C) of the attention-only random UT ((B, 1, C), the last
  row's, with last_only), computed without an M-wide state.

  Its input z = E_tok[x] + E_pos[t] has V + T distinct rows: z = lhs_0 R_0
  with lhs_0 = [onehot(t), onehot(x)] and R_0 = [E_pos; E_tok]. A layer maps
  x = lhs R to sum_h A_h lhs R wv_h = lhs' R' with lhs' = [A_h lhs]_h and
  R' = [R wv_h]_h (H times the rows), and reads x only through x wq and
  x wk = lhs (R wk). So every layer runs on coefficients lhs (B, T, P) and
  the tables R (P, M), P = (T + V) H^l: layer 1 takes its queries and keys
  from R_0's tables and builds lhs_1 = [A_h, A_h onehot(x)]_h (onehot(t)
  needs no matmul); the last layer's logits are sum_h (A_h lhs) (R wv_h U),
  so its tables are never M wide. Per string that is about T P (K H + T H)
  multiply-adds where the M-wide order spends about T M (M H + K H); what
  grows with M, the tables (about P M^2 H), is paid once a call.
  `coefficient_form` says when it is used. params["layers"] may be stacked
  or `split_layers`' form.
  """
  b, s = tokens_BxT.shape
  tok_VxM = params["embed"]["token"]
  pos_SxM = params["embed"]["position"][:s]
  onehot_BxSxV = jax.nn.one_hot(
      tokens_BxT, tok_VxM.shape[0], dtype=tok_VxM.dtype
  )

  rows = lambda w_HxMxN, of: _head_rows(w_HxMxN, of, precision)
  project = lambda lhs, r_PxHxK: _project(lhs, r_PxHxK, precision)

  def from_tables(w_HxMxK):  # Layer 1: (E_tok w)[x] + (E_pos w)[t].
    tok_VxHxK, pos_SxHxK = rows(w_HxMxK, [tok_VxM]), rows(w_HxMxK, [pos_SxM])
    return project(onehot_BxSxV, tok_VxHxK) + pos_SxHxK.transpose(1, 0, 2)[None]

  tables = (pos_SxM, tok_VxM)  # R_0's rows: positions, then tokens.
  lhs_BxSxP = None
  for layer in range(spec.num_layers):
    last = layer == spec.num_layers - 1
    wq, wk, wv = _layer_maps(params["layers"], layer)
    if layer == 0:
      q_BxHxSxK, k_BxHxSxK = from_tables(wq), from_tables(wk)
    else:
      r_PxM = tables[0]
      q_BxHxSxK = project(lhs_BxSxP, rows(wq, [r_PxM]))
      k_BxHxSxK = project(lhs_BxSxP, rows(wk, [r_PxM]))
    if last and last_only:
      q_BxHxSxK = q_BxHxSxK[:, :, -1:]
    a_BxHxQxS = kernels.attention_weights(
        q_BxHxSxK, k_BxHxSxK, causal=spec.causal, precision=precision
    )
    q = a_BxHxQxS.shape[2]
    if layer == 0:  # A_h [onehot(t), onehot(x)] = [A_h, A_h onehot(x)].
      mixed_BxQxHxP = jnp.concatenate(
          [
              a_BxHxQxS.transpose(0, 2, 1, 3),
              jnp.einsum(
                  "bhts,bsv->bthv",
                  a_BxHxQxS,
                  onehot_BxSxV,
                  precision=precision,
              ),
          ],
          axis=-1,
      )
    else:
      mixed_BxQxHxP = jnp.einsum(
          "bhts,bsp->bthp", a_BxHxQxS, lhs_BxSxP, precision=precision
      )
    if last:
      vu_HxMxC = [
          jnp.dot(w, params["unembed"], precision=precision) for w in wv
      ]
      ru_PxHxC = rows(vu_HxMxC, tables)
      return jnp.einsum(
          "bthp,phc->btc", mixed_BxQxHxP, ru_PxHxC, precision=precision
      )
    lhs_BxSxP = mixed_BxQxHxP.reshape(b, q, -1)
    # R' = [R wv_h]_h, rows in lhs' order: (h, p).
    r_PxHxM = rows(wv, tables)
    tables = (r_PxHxM.transpose(1, 0, 2).reshape(-1, r_PxHxM.shape[-1]),)


def _random_residual_coefficients(
    params, spec, tokens_BxT, precision, last_only=False
):
  """The logits (B, T, C) of the random UT with res_ln ((B, 1, C), the last
  row's, with last_only), every layer but the output's without an M-wide
  state.

  As in `_random_attn_coefficients`, the state is z = lhs R: coefficients
  lhs (B, T, P) over rows R (P, M) shared by the batch, first
  lhs_0 = [onehot(t), onehot(x)] and R_0 = [E_pos; E_tok]. LayerNorm keeps
  that form: z - mean(z) = lhs Rc, Rc = R less each row's mean, and
  var(z) = lhs G lhs^T / M with G = Rc Rc^T, so LN(z) = X Rc with
  X = lhs / std(z). A layer adds its heads to the residual:
  z' = z + sum_h A_h X Rc wv_h, that is lhs' = [lhs, A_h X]_h and
  R' = [R; Rc wv_h]_h ((1 + H) P rows), and reads its queries and keys off
  the tables Rc wq and Rc wk. The final LayerNorm and the unembedding read
  the last state formed, lhs R, (B, T, M). So the values cost the tables,
  about P M^2 H a layer once a call, instead of B T M^2 H, with
  P = (T + V) (1 + H)^l. `residual_coefficient_form` says when it is used.
  """
  b, s = tokens_BxT.shape
  tok_VxM = params["embed"]["token"]
  m = tok_VxM.shape[1]
  eye_BxSxS = jnp.broadcast_to(jnp.eye(s, dtype=tok_VxM.dtype), (b, s, s))
  onehot_BxSxV = jax.nn.one_hot(
      tokens_BxT, tok_VxM.shape[0], dtype=tok_VxM.dtype
  )
  lhs_BxSxP = jnp.concatenate([eye_BxSxS, onehot_BxSxV], axis=-1)
  r_PxM = jnp.concatenate([params["embed"]["position"][:s], tok_VxM], axis=0)
  for layer in range(spec.num_layers):
    last = last_only and layer == spec.num_layers - 1
    wq, wk, wv = _layer_maps(params["layers"], layer)
    rc_PxM = r_PxM - r_PxM.mean(axis=1, keepdims=True)
    # HIGHEST, as `kernels.level_stats`' LayerNorm statistics.
    gram_PxP = jnp.dot(rc_PxM, rc_PxM.T, precision=kernels.HIGHEST) / m
    var_BxS = (
        kernels.batched_matmul(
            lhs_BxSxP.reshape(b * s, -1), gram_PxP, kernels.HIGHEST
        ).reshape(lhs_BxSxP.shape)
        * lhs_BxSxP
    ).sum(-1)
    # A sum of squares, but rounding may take it below 0 where it is ~0.
    x_BxSxP = (
        lhs_BxSxP
        * jax.lax.rsqrt(jnp.maximum(var_BxS, 0.0) + kernels.LN_EPS)[..., None]
    )
    if last:
      x_BxQxP, lhs_BxSxP = x_BxSxP[:, -1:], lhs_BxSxP[:, -1:]
    else:
      x_BxQxP = x_BxSxP
    q_BxHxSxK = _project(
        x_BxQxP, _head_rows(wq, [rc_PxM], precision), precision
    )
    k_BxHxSxK = _project(
        x_BxSxP, _head_rows(wk, [rc_PxM], precision), precision
    )
    a_BxHxQxS = kernels.attention_weights(
        q_BxHxSxK, k_BxHxSxK, causal=spec.causal, precision=precision
    )
    mixed_BxQxHxP = jnp.einsum(
        "bhts,bsp->bthp", a_BxHxQxS, x_BxSxP, precision=precision
    )
    values_PxHxM = _head_rows(wv, [rc_PxM], precision)
    q = mixed_BxQxHxP.shape[1]
    lhs_BxSxP = jnp.concatenate(
        [lhs_BxSxP, mixed_BxQxHxP.reshape(b, q, -1)], axis=-1
    )
    # Rows in lhs' order: R's, then (h, p).
    r_PxM = jnp.concatenate(
        [r_PxM, values_PxHxM.transpose(1, 0, 2).reshape(-1, m)], axis=0
    )
  q = lhs_BxSxP.shape[1]
  z_BxQxM = kernels.batched_matmul(
      lhs_BxSxP.reshape(b * q, -1), r_PxM, precision
  ).reshape(b, q, m)
  return kernels.unembed(
      kernels.layer_norm(z_BxQxM), params["unembed"], precision
  )


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
