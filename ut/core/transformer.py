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

Written as in a textbook (einsum, `jax.nn.softmax`): it is the target's forward,
the dense UT's, and the float64 reference of the simulate-check. Kernels laid out
for one backend live elsewhere (`ut.cpu.kernels`) and are tested equal to these.
"""

from typing import Optional

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST


def attention_weights(
    q_BxHxTxK: jax.Array,
    k_BxHxTxK: jax.Array,
    *,
    causal: bool,
    precision=HIGHEST,
) -> jax.Array:
  """Row-softmax of q k^T / sqrt(K), with an optional causal mask: (B, H, T, T)."""
  scale = 1.0 / jnp.sqrt(jnp.asarray(q_BxHxTxK.shape[-1], q_BxHxTxK.dtype))
  s_BxHxTxT = (
      jnp.einsum("bhtk,bhsk->bhts", q_BxHxTxK, k_BxHxTxK, precision=precision)
      * scale
  )
  if causal:
    t = s_BxHxTxT.shape[-1]
    mask_TxT = jnp.tril(jnp.ones((t, t), dtype=bool))
    s_BxHxTxT = jnp.where(
        mask_TxT[None, None], s_BxHxTxT, jnp.finfo(s_BxHxTxT.dtype).min
    )
  return jax.nn.softmax(s_BxHxTxT, axis=-1)


def attention_maps(
    x_BxTxW: jax.Array,
    wq_HxWxK: jax.Array,
    wk_HxWxK: jax.Array,
    *,
    causal: bool,
    precision=HIGHEST,
) -> jax.Array:
  """A_h for every head, (B, H, T, T)."""
  q_BxHxTxK = jnp.einsum(
      "btw,hwk->bhtk", x_BxTxW, wq_HxWxK, precision=precision
  )
  k_BxHxTxK = jnp.einsum(
      "btw,hwk->bhtk", x_BxTxW, wk_HxWxK, precision=precision
  )
  return attention_weights(
      q_BxHxTxK, k_BxHxTxK, causal=causal, precision=precision
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
) -> jax.Array:
  """Sum over heads of A_h X wv_h wo_h (no residual), (B, T, W).

  Without wo (a UT) the values are the output: V = W.
  """
  a_BxHxTxT = attention_maps(
      x_BxTxW, wq_HxWxK, wk_HxWxK, causal=causal, precision=precision
  )
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
