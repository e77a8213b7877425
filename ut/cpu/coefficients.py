"""Random-UT coefficient forms (impl "xla_cpu") and when `apply` uses them.

Shape glossary: B batch, T tokens (S as keys), V vocabulary, C classes, M
model width, H heads, K head width, P the coefficient rows a layer reads.

The attention-only random UT (`_random_attn_coefficients`) and the one with
res_ln (`_random_residual_coefficients`) keep their state as coefficients
over rows shared by the batch instead of an M-wide array; `coefficient_form`
and `residual_coefficient_form` count the multiply-adds that decide when
`ut.cpu.forward.apply` takes them. `split_layers` lays the frozen maps out so
that a jitted step reads them in place. `spec` is duck-typed, as in
`ut.cpu.forward`.
"""

import jax
import jax.numpy as jnp

from ut.core import transformer
from ut.cpu import kernels


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
