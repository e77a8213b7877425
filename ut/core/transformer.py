"""The one attention-only forward pass shared by targets and dense UTs.

Shape glossary:
  B batch, T tokens (sequence length n), W model width (d for a target, m for a UT),
  K query/key width, V value width, H heads, L layers, D input width, O output width.

Parameters are a dict of stacked arrays:
  wq, wk: (Lp, H, W, K);  wv: (Lp, H, W, V);  wo: (Lp, H, V, W) or absent (V = W);
  embed: (D, W) or absent;  unembed: (W, O') or absent;  readout: (O', O) or absent.
Lp is 1 (the same weights in every layer: looped) or the number of layers.

  X_0 = x @ embed
  X_l = [X_{l-1} +] sum_h softmax(mask(X q_h (X k_h)^T / sqrt(K))) X wv_h wo_h
  y   = X_L @ unembed @ readout

An attention layer may compute its output for the last few rows only (x_query,
Q of them): the queries come from those rows, keys and values from every row,
and the causal mask lets query i see positions up to T - Q + i. A single last
row sees every position, so it needs no mask (causal or not: the same row).

Written as in a textbook (einsum, `jax.nn.softmax`): it is the target's forward,
the dense UT's, and the float64 reference of the simulate-check. Kernels laid out
for one backend live elsewhere (`ut.cpu.kernels`) and are tested equal to these.
"""

from typing import Optional

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST


def causal_mask(num_queries: int, num_keys: int):
  """(Q, T) bool: query i, the position T - Q + i, sees positions <= its own;
  None when every query sees every position (Q <= 1: the last row)."""
  if num_queries <= 1:
    return None
  return jnp.tril(
      jnp.ones((num_queries, num_keys), dtype=bool), k=num_keys - num_queries
  )


def attention_weights(
    q_BxHxQxK: jax.Array,
    k_BxHxTxK: jax.Array,
    *,
    causal: bool,
    precision=HIGHEST,
    scale: Optional[jax.Array] = None,
) -> jax.Array:
  """Row-softmax of q k^T / sqrt(K), with an optional causal mask: (B, H, Q, T).

  The Q queries are the last Q of the T positions (Q = T: every row). scale
  replaces 1/sqrt(K) (zero-padded heads keep their unpadded K's:
  `ut.core.simulate.forward_padded`).
  """
  if scale is None:
    scale = 1.0 / jnp.sqrt(jnp.asarray(q_BxHxQxK.shape[-1], q_BxHxQxK.dtype))
  s_BxHxQxT = (
      jnp.einsum("bhtk,bhsk->bhts", q_BxHxQxK, k_BxHxTxK, precision=precision)
      * scale
  )
  mask_QxT = causal_mask(*s_BxHxQxT.shape[-2:]) if causal else None
  if mask_QxT is not None:
    s_BxHxQxT = jnp.where(
        mask_QxT[None, None], s_BxHxQxT, jnp.finfo(s_BxHxQxT.dtype).min
    )
  return jax.nn.softmax(s_BxHxQxT, axis=-1)


def attention_maps(
    x_BxTxW: jax.Array,
    wq_HxWxK: jax.Array,
    wk_HxWxK: jax.Array,
    *,
    causal: bool,
    precision=HIGHEST,
    x_query: Optional[jax.Array] = None,
    scale: Optional[jax.Array] = None,
) -> jax.Array:
  """A_h for every head, (B, H, T, T); (B, H, Q, T) for the Q rows of x_query
  (B, Q, W), the last Q rows of x. scale: as in `attention_weights`."""
  x_BxQxW = x_BxTxW if x_query is None else x_query
  q_BxHxQxK = jnp.einsum(
      "btw,hwk->bhtk", x_BxQxW, wq_HxWxK, precision=precision
  )
  k_BxHxTxK = jnp.einsum(
      "btw,hwk->bhtk", x_BxTxW, wk_HxWxK, precision=precision
  )
  return attention_weights(
      q_BxHxQxK, k_BxHxTxK, causal=causal, precision=precision, scale=scale
  )


def attention_layer(
    x_BxTxW: jax.Array,
    wq_HxWxK: jax.Array,
    wk_HxWxK: jax.Array,
    wv_HxWxV: jax.Array,
    wo_HxVxW: Optional[jax.Array] = None,
    *,
    causal: bool,
    precision=HIGHEST,
    x_query: Optional[jax.Array] = None,
    scale: Optional[jax.Array] = None,
) -> jax.Array:
  """Sum over heads of A_h X wv_h wo_h (no residual), (B, T, W).

  Without wo (a UT) the values are the output: V = W. With x_query (B, Q, W),
  the last Q rows of x, only their Q rows are computed, (B, Q, W), as
  (A_h X) wv_h: Q T W + Q W V multiply-adds per head instead of the values'
  T W V (for Q = 1, the last row, always fewer).
  """
  a_BxHxTxT = attention_maps(
      x_BxTxW,
      wq_HxWxK,
      wk_HxWxK,
      causal=causal,
      precision=precision,
      x_query=x_query,
      scale=scale,
  )
  if x_query is not None:
    ax_BxHxQxW = jnp.einsum(
        "bhts,bsw->bhtw", a_BxHxTxT, x_BxTxW, precision=precision
    )
    if wo_HxVxW is None:
      return jnp.einsum(
          "bhtw,hwv->btv", ax_BxHxQxW, wv_HxWxV, precision=precision
      )
    o_BxHxQxV = jnp.einsum(
        "bhtw,hwv->bhtv", ax_BxHxQxW, wv_HxWxV, precision=precision
    )
    return jnp.einsum("bhtv,hvw->btw", o_BxHxQxV, wo_HxVxW, precision=precision)
  v_BxHxTxV = jnp.einsum(
      "btw,hwv->bhtv", x_BxTxW, wv_HxWxV, precision=precision
  )
  o_BxHxTxV = jnp.einsum(
      "bhts,bhsv->bhtv", a_BxHxTxT, v_BxHxTxV, precision=precision
  )
  if wo_HxVxW is None:
    return o_BxHxTxV.sum(axis=1)
  return jnp.einsum("bhtv,hvw->btw", o_BxHxTxV, wo_HxVxW, precision=precision)


def layer_params(params: dict, layer: int) -> tuple:
  """The (wq, wk, wv, wo) of one layer; looped stacks (Lp == 1) serve every layer."""
  idx = layer if params["wq"].shape[0] > 1 else 0
  wo = params.get("wo")
  return (
      params["wq"][idx],
      params["wk"][idx],
      params["wv"][idx],
      None if wo is None else wo[idx],
  )


def forward(
    params: dict,
    x_BxTxD: jax.Array,
    *,
    num_layers: int,
    causal: bool,
    residual: bool,
    precision=HIGHEST,
) -> jax.Array:
  """Runs the attention-only transformer; returns (B, T, O)."""
  lp = params["wq"].shape[0]
  if lp not in (1, num_layers):
    raise ValueError(
        f"weights stack {lp} layers; expected 1 (looped) or "
        f"num_layers={num_layers}"
    )
  x = x_BxTxD
  if params.get("embed") is not None:
    x = jnp.einsum("btd,dw->btw", x, params["embed"], precision=precision)
  for layer in range(num_layers):
    out = attention_layer(
        x, *layer_params(params, layer), causal=causal, precision=precision
    )
    x = x + out if residual else out
  for name in ("unembed", "readout"):
    if params.get(name) is not None:
      x = jnp.einsum("btw,wo->bto", x, params[name], precision=precision)
  return x
