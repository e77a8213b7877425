"""The sparse tree-routing universal transformer (DESIGN §3, Theorem 3.1).

Shape glossary: H heads, L layers, d block width (= target width), P blocks,
m = P d UT width, B batch, T tokens, Q routed (non-leaf) blocks.

Blocks of width d are indexed by strings over the heads {0..H-1}:
  ("s", s) for |s| <= L        state blocks; E puts C_s there;
  ("q", h, s) for |s| <= L-1   query blocks; E puts sqrt(d) C_s B[|s|+1, h] there.
Blocks are ordered routed-first: every block that can receive a value (a state
block with |s| <= L-1, a query block with |s| <= L-2) comes before the leaves,
so routing writes a prefix of the blocks and zero-fills the rest.

The same weights serve every layer:
  R_Q[h]  selects ("q", h, ());  R_K[h] and U select ("s", ());
  R_V[g]  moves (role, g.t) to (role, t); root blocks and blocks whose first
          symbol is not g are dropped.
`SparseUT` keeps these as index arrays: routing is a gather of d-wide blocks,
and no m x m matrix is ever built (`sparse_apply`). `to_dense` builds the {0,1}
matrices for small sizes; `transformer.forward` on them is the dense formulation.
"""

import itertools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from ut import bounds
from ut import transformer


@flax.struct.dataclass
class SparseUT:
  """Index form of the tree-routing UT.

  src: (H, Q) int32, src[g, i] is the block routed into block i by head g.
  q_root: (H,) int32, the block R_Q[h] selects.  The state root is block 0.
  """
  src: jax.Array
  q_root: jax.Array
  num_heads: int = flax.struct.field(pytree_node=False)
  num_layers: int = flax.struct.field(pytree_node=False)
  width: int = flax.struct.field(pytree_node=False)
  num_blocks: int = flax.struct.field(pytree_node=False)

  @property
  def m(self):
    return self.num_blocks * self.width


def block_names(num_heads, num_layers):
  """Block keys in layout order: routed blocks first, then leaves."""
  strings = lambda j: list(itertools.product(range(num_heads), repeat=j))
  routed, leaves = [], []
  for j in range(num_layers + 1):
    (routed if j < num_layers else leaves).extend(("s", s) for s in strings(j))
  for h in range(num_heads):
    for j in range(num_layers):
      (routed if j < num_layers - 1 else leaves).extend(
          ("q", h, s) for s in strings(j))
  return routed + leaves


def make_sparse_ut(num_heads, num_layers, width):
  """Builds the tree-routing UT for targets with (H, L, d) = the arguments."""
  m = bounds.sparse_width(num_heads, num_layers, width)
  names = block_names(num_heads, num_layers)
  index = {name: i for i, name in enumerate(names)}
  num_routed = sum(1 for name in names if len(name[-1]) < num_layers -
                   (name[0] == "q"))
  src = np.zeros((num_heads, num_routed), np.int32)
  for i, name in enumerate(names[:num_routed]):
    for g in range(num_heads):
      src[g, i] = index[name[:-1] + ((g,) + name[-1],)]
  q_root = np.array([index[("q", h, ())] for h in range(num_heads)], np.int32)
  assert len(names) * width == m and index[("s", ())] == 0
  return SparseUT(src=src, q_root=q_root, num_heads=num_heads,
                  num_layers=num_layers, width=width, num_blocks=len(names))


def to_dense(ut, dtype=np.float32):
  """The {0,1} matrices: wq, wk (1, H, m, d), wv (1, H, m, m), unembed (m, d)."""
  h, d, m = ut.num_heads, ut.width, ut.m
  eye = np.eye(d, dtype=dtype)
  block = lambda i: slice(i * d, (i + 1) * d)
  wq = np.zeros((1, h, m, d), dtype)
  wk = np.zeros((1, h, m, d), dtype)
  wv = np.zeros((1, h, m, m), dtype)
  unembed = np.zeros((m, d), dtype)
  unembed[block(0)] = eye
  src = np.asarray(ut.src)
  for g in range(h):
    wq[0, g, block(int(ut.q_root[g]))] = eye
    wk[0, g, block(0)] = eye
    for dst, s in enumerate(src[g]):
      wv[0, g, block(int(s)), block(dst)] = eye
  return dict(wq=wq, wk=wk, wv=wv, unembed=unembed)


def sparse_apply(ut, embed_DxM, x_BxTxD, *, causal, residual, readout=None,
                 precision=transformer.HIGHEST):
  """UT(X, E) by block gathers: O(B T m) routing plus O(B T^2 m) attention.

  Returns Z_L U (B, T, d), or Z_L U readout when a readout is given.
  """
  d, p = ut.width, ut.num_blocks
  b, t = x_BxTxD.shape[:2]
  z = jnp.einsum("btd,dm->btm", x_BxTxD, embed_DxM, precision=precision)
  z_BxTxPxd = z.reshape(b, t, p, d)
  num_routed = ut.src.shape[1]
  for _ in range(ut.num_layers):
    q_BxHxTxd = jnp.moveaxis(z_BxTxPxd[:, :, ut.q_root], 2, 1)
    k_BxHxTxd = jnp.broadcast_to(z_BxTxPxd[:, None, :, 0], q_BxHxTxd.shape)
    a_BxHxTxT = transformer.attention_weights(q_BxHxTxd, k_BxHxTxd,
                                              causal=causal, precision=precision)
    v_BxTxHxQxd = z_BxTxPxd[:, :, ut.src]
    routed_BxTxQxd = jnp.einsum("bhts,bshqd->btqd", a_BxHxTxT, v_BxTxHxQxd,
                                precision=precision)
    new = jnp.pad(routed_BxTxQxd, ((0, 0), (0, 0), (0, p - num_routed), (0, 0)))
    z_BxTxPxd = z_BxTxPxd + new if residual else new
  y = z_BxTxPxd[:, :, 0]
  if readout is not None:
    y = jnp.einsum("btd,do->bto", y, readout, precision=precision)
  return y
