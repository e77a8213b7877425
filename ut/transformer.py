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
"""

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST


def attention_weights(q_BxHxTxK, k_BxHxTxK, *, causal, precision=HIGHEST):
  """Row-softmax of q k^T / sqrt(K), with an optional causal mask."""
  scale = 1.0 / jnp.sqrt(jnp.asarray(q_BxHxTxK.shape[-1], q_BxHxTxK.dtype))
  s_BxHxTxT = jnp.einsum("bhtk,bhsk->bhts", q_BxHxTxK, k_BxHxTxK,
                         precision=precision) * scale
  if causal:
    t = s_BxHxTxT.shape[-1]
    mask_TxT = jnp.tril(jnp.ones((t, t), dtype=bool))
    s_BxHxTxT = jnp.where(mask_TxT[None, None], s_BxHxTxT, jnp.finfo(s_BxHxTxT.dtype).min)
  return jax.nn.softmax(s_BxHxTxT, axis=-1)


def attention_layer(x_BxTxW, wq_HxWxK, wk_HxWxK, wv_HxWxV, wo_HxVxW=None, *,
                    causal, precision=HIGHEST):
  """Sum over heads of A_h X wv_h wo_h (no residual).

  Laid out so that no (B, H, T, W) array is transposed: Q and K of every head
  come from one matmul, and without wo (a UT: V = W) sum_h (A_h X) wv_h is one
  batched matmul with rows (t, h) and one matmul contracting (h, w).
  """
  wqk_Wx2xHxK = jnp.stack([wq_HxWxK, wk_HxWxK]).transpose(2, 0, 1, 3)
  qk_BxTx2xHxK = jnp.einsum("btw,wchk->btchk", x_BxTxW, wqk_Wx2xHxK,
                            precision=precision)
  q_BxHxTxK = qk_BxTx2xHxK[:, :, 0].transpose(0, 2, 1, 3)
  k_BxHxTxK = qk_BxTx2xHxK[:, :, 1].transpose(0, 2, 1, 3)
  a_BxHxTxT = attention_weights(q_BxHxTxK, k_BxHxTxK, causal=causal,
                                precision=precision)
  if wo_HxVxW is None and wv_HxWxV.shape[-1] == x_BxTxW.shape[-1]:
    b, t, w = x_BxTxW.shape
    h = wv_HxWxV.shape[0]
    a_BxTHxT = a_BxHxTxT.transpose(0, 2, 1, 3).reshape(b, t * h, t)
    ax_BxTHxW = jnp.einsum("bxs,bsw->bxw", a_BxTHxT, x_BxTxW,
                           precision=precision)
    return jnp.einsum("bthw,hwv->btv", ax_BxTHxW.reshape(b, t, h, w), wv_HxWxV,
                      precision=precision)
  v_BxHxTxV = jnp.einsum("btw,hwv->bhtv", x_BxTxW, wv_HxWxV, precision=precision)
  o_BxHxTxV = jnp.einsum("bhts,bhsv->bhtv", a_BxHxTxT, v_BxHxTxV,
                         precision=precision)
  if wo_HxVxW is None:
    return o_BxHxTxV.sum(axis=1)
  return jnp.einsum("bhtv,hvw->btw", o_BxHxTxV, wo_HxVxW, precision=precision)


def layer_params(params, layer):
  """The (wq, wk, wv, wo) of one layer; looped stacks (Lp == 1) serve every layer."""
  idx = layer if params["wq"].shape[0] > 1 else 0
  wo = params.get("wo")
  return (params["wq"][idx], params["wk"][idx], params["wv"][idx],
          None if wo is None else wo[idx])


def forward(params, x_BxTxD, *, num_layers, causal, residual,
            precision=HIGHEST):
  """Runs the attention-only transformer; returns (B, T, O)."""
  lp = params["wq"].shape[0]
  if lp not in (1, num_layers):
    raise ValueError(f"weights stack {lp} layers; expected 1 (looped) or "
                     f"num_layers={num_layers}")
  x = x_BxTxD
  if params.get("embed") is not None:
    x = jnp.einsum("btd,dw->btw", x, params["embed"], precision=precision)
  for layer in range(num_layers):
    out = attention_layer(x, *layer_params(params, layer), causal=causal,
                          precision=precision)
    x = x + out if residual else out
  for name in ("unembed", "readout"):
    if params.get(name) is not None:
      x = jnp.einsum("btw,wo->bto", x, params[name], precision=precision)
  return x
