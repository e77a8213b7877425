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

import functools

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def batched_matmul(a_BxRxS, x_BxSxN, precision=HIGHEST):
  """a @ x per batch element (any number of batch axes); x may be a list of
  such arrays, each multiplied by a (a list of products is returned).

  The same products as einsum, but the forward pass also writes a transposed
  copy of a, so that the gradient a^T @ g is a plain matmul: XLA CPU runs a
  dot whose left operand contracts over its rows with a generic kernel, 1.5x
  slower for attention at the fixed benchmark size, 25x for a one-hot.
  """
  return jax.tree.map(lambda x: jnp.einsum("...rs,...sn->...rn", a_BxRxS, x,
                                           precision=precision), x_BxSxN)


def _batched_matmul_fwd(a_BxRxS, x_BxSxN, precision):
  # The barrier keeps XLA from folding the transpose back into the dots.
  a_BxSxR = jax.lax.optimization_barrier(a_BxRxS.swapaxes(-1, -2))
  return batched_matmul(a_BxRxS, x_BxSxN, precision), (a_BxSxR, x_BxSxN)


def _batched_matmul_bwd(precision, res, g_BxRxN):
  a_BxSxR, x_BxSxN = res
  pairs = zip(jax.tree.leaves(g_BxRxN), jax.tree.leaves(x_BxSxN))
  da = sum(jnp.einsum("...rn,...sn->...rs", g, x, precision=precision)
           for g, x in pairs)
  dx = jax.tree.map(lambda g: jnp.einsum("...sr,...rn->...sn", a_BxSxR, g,
                                         precision=precision), g_BxRxN)
  return da, dx


batched_matmul.defvjp(_batched_matmul_fwd, _batched_matmul_bwd)


def attention_weights(q_BxHxTxK, k_BxHxTxK, *, causal, precision=HIGHEST):
  """Row-softmax of q k^T / sqrt(K), with an optional causal mask."""
  scale = 1.0 / jnp.sqrt(jnp.asarray(q_BxHxTxK.shape[-1], q_BxHxTxK.dtype))
  s_BxHxTxT = batched_matmul(q_BxHxTxK, k_BxHxTxK.swapaxes(-1, -2),
                             precision) * scale
  if causal:
    t = s_BxHxTxT.shape[-1]
    mask_TxT = jnp.tril(jnp.ones((t, t), dtype=bool))
    s_BxHxTxT = jnp.where(mask_TxT[None, None], s_BxHxTxT, jnp.finfo(s_BxHxTxT.dtype).min)
  return softmax(s_BxHxTxT)


def row_max(x):
  """x.max(-1, keepdims=True) as elementwise maxima of halves.

  The same values, but XLA CPU fuses the halving into one loop; without
  YNNPACK (train.ynn_fusions=False) it runs the reduce over 64 columns as a
  reduce-window at 0.40 ms per (16, 2, 64, 64) array, the halving at 0.18 ms
  (one core). An odd width's halves share their middle column.
  """
  w = x.shape[-1]
  while w > 1:
    h = (w + 1) // 2
    x = jnp.maximum(x[..., :h], x[..., w - h:])
    w = h
  return x


@jax.custom_vjp
def softmax(s):
  """jax.nn.softmax over the last axis, with the gradient y (g - <g, y>).

  Forward as in jax.nn.softmax (with `row_max`); autodiff of it differentiates
  through the normalizing division instead (more passes over (B, H, T, T)
  arrays).
  """
  e = jnp.exp(s - jax.lax.stop_gradient(row_max(s)))
  return e / e.sum(-1, keepdims=True)


def _softmax_fwd(s):
  y = softmax(s)
  return y, y


def _softmax_bwd(y, g):
  return (y * (g - (g * y).sum(-1, keepdims=True)),)


softmax.defvjp(_softmax_fwd, _softmax_bwd)


def attention_maps(x_BxTxW, wq_HxWxK, wk_HxWxK, *, causal, precision=HIGHEST):
  """A_h for every head, (B, H, T, T); Q and K of every head from one matmul."""
  wqk_Wx2xHxK = jnp.stack([wq_HxWxK, wk_HxWxK]).transpose(2, 0, 1, 3)
  qk_BxTx2xHxK = jnp.einsum("btw,wchk->btchk", x_BxTxW, wqk_Wx2xHxK,
                            precision=precision)
  q_BxHxTxK = qk_BxTx2xHxK[:, :, 0].transpose(0, 2, 1, 3)
  k_BxHxTxK = qk_BxTx2xHxK[:, :, 1].transpose(0, 2, 1, 3)
  return attention_weights(q_BxHxTxK, k_BxHxTxK, causal=causal,
                           precision=precision)


def attention_layer(x_BxTxW, wq_HxWxK, wk_HxWxK, wv_HxWxV, wo_HxVxW=None, *,
                    causal, precision=HIGHEST):
  """Sum over heads of A_h X wv_h wo_h (no residual).

  Laid out so that no (B, H, T, W) array is transposed: Q and K of every head
  come from one matmul, and without wo (a UT: V = W) sum_h (A_h X) wv_h is one
  batched matmul with rows (t, h) and one matmul contracting (h, w).
  """
  a_BxHxTxT = attention_maps(x_BxTxW, wq_HxWxK, wk_HxWxK, causal=causal,
                             precision=precision)
  if wo_HxVxW is None and wv_HxWxV.shape[-1] == x_BxTxW.shape[-1]:
    b, t, w = x_BxTxW.shape
    h = wv_HxWxV.shape[0]
    a_BxTHxT = a_BxHxTxT.transpose(0, 2, 1, 3).reshape(b, t * h, t)
    ax_BxTHxW = batched_matmul(a_BxTHxT, x_BxTxW, precision)
    return jnp.einsum("bthw,hwv->btv", ax_BxTHxW.reshape(b, t, h, w), wv_HxWxV,
                      precision=precision)
  v_BxHxTxV = jnp.einsum("btw,hwv->bhtv", x_BxTxW, wv_HxWxV, precision=precision)
  o_BxHxTxV = batched_matmul(a_BxHxTxT, v_BxHxTxV, precision)
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
