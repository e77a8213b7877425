"""XLA-CPU kernels: the same values as the textbook ops, laid out for XLA CPU.

Shape glossary: B batch, T tokens, W model width, K query/key width, V value
width, H heads, N rows, M model width of a training model, C classes.

Each function here computes what a line of `ut.core.transformer` or of the
training models computes (the tests check them equal, gradients included), but
is arranged for how XLA CPU runs it: custom VJPs whose backward passes are
plain matmuls, an optimisation barrier that keeps a transposed copy alive, a
row maximum by halving, and LayerNorm row sums as matmuls. They are chosen by
`ModelSpec.impl == "xla_cpu"` (see `ut.cpu.forward`), never by the core.
"""

import functools

import jax
import jax.numpy as jnp

from ut.core import transformer

HIGHEST = jax.lax.Precision.HIGHEST
LN_EPS = 1e-5  # LayerNorm's, as `ut.training.models.layer_norm`.


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def batched_matmul(a_BxRxS, x_BxSxN, precision=HIGHEST):
  """a @ x per batch element (any number of batch axes); x may be a list of
  such arrays, each multiplied by a (a list of products is returned).

  The same products as einsum, but the forward pass also writes a transposed
  copy of a, so that the gradient a^T @ g is a plain matmul: XLA CPU runs a
  dot whose left operand contracts over its rows with a generic, much slower
  kernel (worst for a one-hot).
  """
  return jax.tree.map(
      lambda x: jnp.einsum(
          "...rs,...sn->...rn", a_BxRxS, x, precision=precision
      ),
      x_BxSxN,
  )


def _batched_matmul_fwd(a_BxRxS, x_BxSxN, precision):
  # The barrier keeps XLA from folding the transpose back into the dots.
  a_BxSxR = jax.lax.optimization_barrier(a_BxRxS.swapaxes(-1, -2))
  return batched_matmul(a_BxRxS, x_BxSxN, precision), (a_BxSxR, x_BxSxN)


def _batched_matmul_bwd(precision, res, g_BxRxN):
  a_BxSxR, x_BxSxN = res
  pairs = zip(jax.tree.leaves(g_BxRxN), jax.tree.leaves(x_BxSxN))
  da = sum(
      jnp.einsum("...rn,...sn->...rs", g, x, precision=precision)
      for g, x in pairs
  )
  dx = jax.tree.map(
      lambda g: jnp.einsum(
          "...sr,...rn->...sn", a_BxSxR, g, precision=precision
      ),
      g_BxRxN,
  )
  return da, dx


batched_matmul.defvjp(_batched_matmul_fwd, _batched_matmul_bwd)


def row_max(x):
  """x.max(-1, keepdims=True) as elementwise maxima of halves.

  The same values, but XLA CPU fuses the halving into one loop where, without
  its YNNPACK fusions, it runs the reduce as a slower reduce-window. An odd
  width's halves share their middle column.
  """
  w = x.shape[-1]
  while w > 1:
    h = (w + 1) // 2
    x = jnp.maximum(x[..., :h], x[..., w - h :])
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


def attention_weights(q_BxHxQxK, k_BxHxTxK, *, causal, precision=HIGHEST):
  """`transformer.attention_weights` with `batched_matmul` and `softmax`: the
  Q queries are the last Q of the T positions, (B, H, Q, T)."""
  scale = 1.0 / jnp.sqrt(jnp.asarray(q_BxHxQxK.shape[-1], q_BxHxQxK.dtype))
  s_BxHxQxT = (
      batched_matmul(q_BxHxQxK, k_BxHxTxK.swapaxes(-1, -2), precision) * scale
  )
  mask_QxT = transformer.causal_mask(*s_BxHxQxT.shape[-2:]) if causal else None
  if mask_QxT is not None:
    s_BxHxQxT = jnp.where(
        mask_QxT[None, None], s_BxHxQxT, jnp.finfo(s_BxHxQxT.dtype).min
    )
  return softmax(s_BxHxQxT)


def attention_maps(
    x_BxTxW, wq_HxWxK, wk_HxWxK, *, causal, precision=HIGHEST, x_query=None
):
  """`transformer.attention_maps`, Q and K of every head from one matmul (with
  x_query (B, Q, W), the last Q rows of x: Q from its rows, (B, H, Q, T))."""
  if x_query is not None:
    q_BxQxHxK = jnp.einsum(
        "btw,hwk->bthk", x_query, wq_HxWxK, precision=precision
    )
    k_BxTxHxK = jnp.einsum(
        "btw,hwk->bthk", x_BxTxW, wk_HxWxK, precision=precision
    )
    return attention_weights(
        q_BxQxHxK.transpose(0, 2, 1, 3),
        k_BxTxHxK.transpose(0, 2, 1, 3),
        causal=causal,
        precision=precision,
    )
  wqk_Wx2xHxK = jnp.stack([wq_HxWxK, wk_HxWxK]).transpose(2, 0, 1, 3)
  qk_BxTx2xHxK = jnp.einsum(
      "btw,wchk->btchk", x_BxTxW, wqk_Wx2xHxK, precision=precision
  )
  q_BxHxTxK = qk_BxTx2xHxK[:, :, 0].transpose(0, 2, 1, 3)
  k_BxHxTxK = qk_BxTx2xHxK[:, :, 1].transpose(0, 2, 1, 3)
  return attention_weights(
      q_BxHxTxK, k_BxHxTxK, causal=causal, precision=precision
  )


def attention_layer(
    x_BxTxW,
    wq_HxWxK,
    wk_HxWxK,
    wv_HxWxV,
    wo_HxVxW=None,
    *,
    causal,
    precision=HIGHEST,
    x_query=None,
):
  """`transformer.attention_layer` laid out so that no (B, H, T, W) array is
  transposed.

  Q and K of every head come from one matmul, and without wo (a UT: V = W)
  sum_h (A_h X) wv_h is one batched matmul with rows (t, h) and one matmul
  contracting (h, w). With x_query (B, Q, W), the last Q rows of x, only
  their rows, (B, Q, W), and always as (A_h X) wv_h [wo_h]: the values of
  every row are never formed.
  """
  a_BxHxQxT = attention_maps(
      x_BxTxW,
      wq_HxWxK,
      wk_HxWxK,
      causal=causal,
      precision=precision,
      x_query=x_query,
  )
  if x_query is not None or (
      wo_HxVxW is None and wv_HxWxV.shape[-1] == x_BxTxW.shape[-1]
  ):
    b, q, t = a_BxHxQxT.shape[0], a_BxHxQxT.shape[2], x_BxTxW.shape[1]
    h, w = wv_HxWxV.shape[0], x_BxTxW.shape[-1]
    a_BxQHxT = a_BxHxQxT.transpose(0, 2, 1, 3).reshape(b, q * h, t)
    ax_BxQxHxW = batched_matmul(a_BxQHxT, x_BxTxW, precision).reshape(
        b, q, h, w
    )
    if wo_HxVxW is None:
      return jnp.einsum(
          "bthw,hwv->btv", ax_BxQxHxW, wv_HxWxV, precision=precision
      )
    o_BxQxHxV = jnp.einsum(
        "bthw,hwv->bthv", ax_BxQxHxW, wv_HxWxV, precision=precision
    )
    return jnp.einsum("bthv,hvw->btw", o_BxQxHxV, wo_HxVxW, precision=precision)
  a_BxHxTxT = a_BxHxQxT
  v_BxHxTxV = jnp.einsum(
      "btw,hwv->bhtv", x_BxTxW, wv_HxWxV, precision=precision
  )
  o_BxHxTxV = batched_matmul(a_BxHxTxT, v_BxHxTxV, precision)
  if wo_HxVxW is None:
    return o_BxHxTxV.sum(axis=1)
  return jnp.einsum("bhtv,hvw->btw", o_BxHxTxV, wo_HxVxW, precision=precision)


def level_stats(levels, eps=LN_EPS):
  """LayerNorm's mean and 1/std, (B, T, 1), of the concatenation of `levels`.

  The row sums are matmuls with a ones vector: XLA CPU runs them in its dot
  library, faster than its reduce. They run at HIGHEST precision: a reduce is
  exact in float32, but a default-precision matmul rounds its inputs to
  bfloat16 on TPU (and to TF32 on recent GPUs); at HIGHEST they match the
  reduce's LayerNorm there too, at no cost on CPU, which computes float32 dots
  in full either way.
  """
  m = sum(z.shape[-1] for z in levels)
  rowsum = lambda x: jnp.matmul(
      x, jnp.ones((x.shape[-1], 1), x.dtype), precision=HIGHEST
  )
  mean = sum(rowsum(z) for z in levels) / m
  var = sum(rowsum(jnp.square(z - mean)) for z in levels) / m
  return mean, jax.lax.rsqrt(var + eps)


def layer_norm(z, eps=LN_EPS):
  """Parameter-free LayerNorm over the last axis, from `level_stats`."""
  mean, inv = level_stats([z], eps)
  return (z - mean) * inv


def normed_matmul(levels, rows, stats, precision):
  """layer_norm(concat(levels)) @ concat(rows), without the normalised state.

  LN(z) W = inv (z W - mean 1^T W): one pass over the m-wide state and no
  m-wide temporary. rows[j] has at least levels[j]'s width of rows (the
  leading ones are used); a None level is skipped. stats = `level_stats(levels)`.
  """
  mean, inv = stats
  zw = sum(
      jnp.einsum("btm,mf->btf", z, w[: z.shape[-1]], precision=precision)
      for z, w in zip(levels, rows)
      if z is not None
  )
  colsum = sum(
      w[: z.shape[-1]].sum(0) for z, w in zip(levels, rows) if z is not None
  )
  return inv * (zw - mean * colsum[None, None])


def token_embed(tokens_BxT, table_VxM, precision=None):
  """Rows of the token table, (B, T, M), as a one-hot matmul.

  Its gradient is then a matmul too, where a gather's is a scatter-add, which
  is slow on CPU; `batched_matmul` makes it onehot^T @ dZ from a (V, B T) copy
  of the one-hot (XLA CPU otherwise transposes dZ and runs a generic kernel).
  """
  b, t = tokens_BxT.shape
  onehot_NxV = jax.nn.one_hot(
      tokens_BxT.reshape(b * t), table_VxM.shape[0], dtype=table_VxM.dtype
  )
  return batched_matmul(onehot_NxV, table_VxM, precision).reshape(b, t, -1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def unembed(z_BxTxM, u_MxC, precision=None):
  """z @ U, (B, T, C), with a gradient XLA CPU runs fast for few classes.

  Autodiff's dz = g U^T is a dot contracting over C (2 for Dyck), which XLA
  CPU runs at a small fraction of its speed; for C <= 8 it is C broadcast
  multiply-adds here. dU = (g^T z)^T keeps z untransposed.
  """
  return jnp.einsum("btm,mc->btc", z_BxTxM, u_MxC, precision=precision)


def _unembed_fwd(z_BxTxM, u_MxC, precision):
  return unembed(z_BxTxM, u_MxC, precision), (z_BxTxM, u_MxC)


def _unembed_bwd(precision, res, g_BxTxC):
  z_BxTxM, u_MxC = res
  c = u_MxC.shape[1]
  if c <= 8:
    dz = sum(
        g_BxTxC[..., i : i + 1] * u_MxC[None, None, :, i] for i in range(c)
    )
  else:
    dz = jnp.einsum("btc,mc->btm", g_BxTxC, u_MxC, precision=precision)
  du = jnp.einsum("btc,btm->cm", g_BxTxC, z_BxTxM, precision=precision).T
  return dz, du


unembed.defvjp(_unembed_fwd, _unembed_bwd)
