"""The sparse tree-routing universal transformer (DESIGN §3, Theorem 3.1).

Shape glossary: H heads, L layers, d block width (= target width), P blocks,
m = P d UT width, B batch, T tokens (S: as keys), Q routed (non-leaf) blocks
(in attention shapes: query rows), F_j the width a level holds, D the width
of X (d, or any width for `sparse_apply`'s paths), N = H T (head, query) rows.

Blocks of width d are indexed by strings over the heads {0..H-1}:
  ("s", s) for |s| <= L        state blocks; E puts C_s there;
  ("q", h, s) for |s| <= L-1   query blocks; E puts sqrt(d) C_s B[|s|+1, h] there.
The one block order (`block_names`; every module uses it): by level j = |s|,
then by string s in lexicographic order (first symbol most significant), then
by role: ("s", s), ("q", 0, s), ..., ("q", H-1, s) (the leaves, j = L, have the
state role only). So a level is (strings, roles, d), and the strings g.t of
level j+1 with first symbol g form the g-th of H equal contiguous runs, each
laid out as level j is: routing level j+1 into level j is a reshape
(`children_by_head`).

The same weights serve every layer:
  R_Q[h]  selects ("q", h, ());  R_K[h] and U select ("s", ());
  R_V[g]  moves (role, g.t) to (role, t); root blocks and blocks whose first
          symbol is not g are dropped.
`route_levels` (one layer) routes by reshaping d-wide blocks, and
`sparse_apply` (the whole UT) routes X along head strings and reads the root
from E: no m x m matrix is ever built. `SparseUT.src` lists the same
routing as indices, and `to_dense` builds the {0,1} matrices from it for small
sizes; `transformer.forward` on them is the dense formulation (the tests'
oracle).
"""

import dataclasses
import itertools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import bounds
from ut.core import transformer


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SparseUT:
  """Index form of the tree-routing UT.

  src: (H, Q) int32, src[g, i] is the block head g routes into block dst[i].
  dst: (Q,) int32, the blocks that receive a value (the others are zeroed).
  q_root: (H,) int32, the block R_Q[h] selects.  The state root is block 0.
  """

  src: jax.Array
  dst: jax.Array
  q_root: jax.Array
  num_heads: int = dataclasses.field(metadata=dict(static=True))
  num_layers: int = dataclasses.field(metadata=dict(static=True))
  width: int = dataclasses.field(metadata=dict(static=True))
  num_blocks: int = dataclasses.field(metadata=dict(static=True))

  @property
  def m(self):
    return self.num_blocks * self.width


def _strings(num_heads, length):
  return list(itertools.product(range(num_heads), repeat=length))


def level_roles(num_heads: int, num_layers: int, level: int) -> int:
  """Roles present at a level: the state role, plus H query roles below L."""
  return 1 + num_heads if level < num_layers else 1


def block_names(num_heads: int, num_layers: int) -> list[tuple]:
  """Block keys in the layout order: by level, then string, then role."""
  names = []
  for j in range(num_layers + 1):
    for s in _strings(num_heads, j):
      names.append(("s", s))
      if j < num_layers:
        names.extend(("q", h, s) for h in range(num_heads))
  return names


def make_sparse_ut(num_heads: int, num_layers: int, width: int) -> SparseUT:
  """Builds the tree-routing UT for targets with (H, L, d) = the arguments."""
  m = bounds.sparse_width(num_heads, num_layers, width)
  names = block_names(num_heads, num_layers)
  index = {name: i for i, name in enumerate(names)}
  routed = [
      (i, name)
      for i, name in enumerate(names)
      if len(name[-1]) < num_layers - (name[0] == "q")
  ]
  src = np.zeros((num_heads, len(routed)), np.int32)
  dst = np.array([i for i, _ in routed], np.int32)
  for k, (_, name) in enumerate(routed):
    for g in range(num_heads):
      src[g, k] = index[name[:-1] + ((g,) + name[-1],)]
  q_root = np.array([index[("q", h, ())] for h in range(num_heads)], np.int32)
  assert len(names) * width == m and index[("s", ())] == 0
  return SparseUT(
      src=src,
      dst=dst,
      q_root=q_root,
      num_heads=num_heads,
      num_layers=num_layers,
      width=width,
      num_blocks=len(names),
  )


def to_dense(ut: SparseUT, dtype=np.float32) -> dict[str, np.ndarray]:
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
    for s, t in zip(src[g], np.asarray(ut.dst)):
      wv[0, g, block(int(s)), block(int(t))] = eye
  return dict(wq=wq, wk=wk, wv=wv, unembed=unembed)


def _level_sizes(ut):
  h, num_layers, d = ut.num_heads, ut.num_layers, ut.width
  return [
      level_roles(h, num_layers, j) * h**j * d for j in range(num_layers + 1)
  ]


def level_slices(ut: SparseUT) -> list[slice]:
  """Static column ranges of the levels in the m-wide state."""
  offsets = np.cumsum([0] + _level_sizes(ut))
  return [slice(int(lo), int(hi)) for lo, hi in zip(offsets[:-1], offsets[1:])]


def root_queries_keys(
    ut: SparseUT, level0_BxTxF: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Every head's queries and keys, (B, H, T, d) each, from the root blocks.

  Level 0 is [("s", ()), ("q", 0, ()), ..., ("q", H-1, ())]: head h's queries
  are its query block, and every head's keys are the state block.
  """
  h, d = ut.num_heads, ut.width
  assert level0_BxTxF.shape[-1] == (1 + h) * d, "level 0 lost its query blocks"
  b, t = level0_BxTxF.shape[:2]
  q_BxHxTxd = level0_BxTxF[:, :, d:].reshape(b, t, h, d).transpose(0, 2, 1, 3)
  k_BxHxTxd = jnp.broadcast_to(level0_BxTxF[:, None, :, :d], q_BxHxTxd.shape)
  return q_BxHxTxd, k_BxHxTxd


def root_attention(
    ut: SparseUT,
    level0_BxTxF: jax.Array,
    *,
    causal: bool,
    precision=transformer.HIGHEST,
    query0: Optional[jax.Array] = None,
) -> jax.Array:
  """A_h for every head from the root blocks: (B, H, T, T).

  With query0 (B, Q, F_0), level 0 of the last Q rows, the queries are its
  rows (keys are still every row's): (B, H, Q, T).
  """
  q_BxHxTxd, k_BxHxTxd = root_queries_keys(ut, level0_BxTxF)
  if query0 is not None:
    q_BxHxTxd = root_queries_keys(ut, query0)[0]
  return transformer.attention_weights(
      q_BxHxTxd, k_BxHxTxd, causal=causal, precision=precision
  )


def children_by_head(level_BxTxF: jax.Array, num_heads: int) -> jax.Array:
  """Level j+1 as (B, T, H, F / H): [..., g, :] holds its strings g.t, laid out
  as level j's strings t (with the roles level j+1 holds), so that head g
  routes it into level j as it stands."""
  b, t = level_BxTxF.shape[:2]
  return level_BxTxF.reshape(b, t, num_heads, -1)


def pad_roles(n_BxTxF: jax.Array, size: int, strings: int) -> jax.Array:
  """A level that holds only the leading roles of each of its `strings`
  strings, padded with zeros to the full level width `size`."""
  if n_BxTxF.shape[-1] == size:
    return n_BxTxF
  b, t, _ = n_BxTxF.shape
  n = n_BxTxF.reshape(b, t, strings, -1)
  n = jnp.pad(n, ((0, 0), (0, 0), (0, 0), (0, size // strings - n.shape[-1])))
  return n.reshape(b, t, size)


def route_levels(
    ut: SparseUT,
    levels: list,
    *,
    causal: bool,
    precision=transformer.HIGHEST,
    query0: Optional[jax.Array] = None,
) -> list:
  """One UT layer without residual: sum_h A_h Z R_V[h], on per-level arrays.

  levels[j]: (B, T, F_j), or None for a level known to be zero (level 0 is
  never None). A level may hold only the leading roles of each of its strings,
  F_j = roles * H^j * d, the rest being known zero: the leaves have no query
  blocks, so what is routed out of the deepest level is the state role alone,
  and it is kept that narrow (no zero columns are routed; `pad_roles` widens
  it). Returns the new levels, None where nothing is routed. With query0
  (B, Q, F_0), level 0 of the last Q rows, only those Q rows are computed
  (their queries attend to every row's keys and values): (B, Q, F_j).
  """
  h = ut.num_heads
  a_BxHxTxT = root_attention(
      ut, levels[0], causal=causal, precision=precision, query0=query0
  )
  new = []
  for j in range(ut.num_layers):
    if levels[j + 1] is None:  # Known zero: nothing to route.
      new.append(None)
      continue
    # Level j+1, string g.t, role r  ->  level j, string t, role r, via head g.
    src_BxTxHxF = children_by_head(levels[j + 1], h)
    new.append(
        jnp.einsum(
            "bgts,bsgf->btf", a_BxHxTxT, src_BxTxHxF, precision=precision
        )
    )
  new.append(None)  # Leaves receive nothing.
  return new


def _first_layer(ut, embed_DxM, x_BxTxD, *, causal, precision):
  """Layer 1 without residual, from X and E; returns (level 0 of X E, new levels).

  Values are linear in X, so sum_g A_g (X E_{g.t}) = sum_g (A_g X) E_{g.t}: one
  (B T, H d) @ (H d, F) matmul, and the (B, T, m) embedding is never built.
  """
  h, d = ut.num_heads, ut.width
  b, t = x_BxTxD.shape[:2]
  e_levels = [embed_DxM[:, s] for s in level_slices(ut)]
  level0 = jnp.einsum("btd,df->btf", x_BxTxD, e_levels[0], precision=precision)
  a_BxHxTxT = root_attention(ut, level0, causal=causal, precision=precision)
  ax_BxTxHd = jnp.einsum(
      "bgts,bsd->btgd", a_BxHxTxT, x_BxTxD, precision=precision
  ).reshape(b, t, h * d)
  # Level j+1's columns are (g, level j's columns): rows (g, d) of one matmul.
  w = [
      e.reshape(d, h, -1).transpose(1, 0, 2).reshape(h * d, -1)
      for e in e_levels[1:]
  ]
  routed = jnp.einsum(
      "btk,kf->btf", ax_BxTxHd, jnp.concatenate(w, axis=1), precision=precision
  )
  offsets = np.cumsum([0] + [wj.shape[1] for wj in w])
  return level0, [
      routed[..., lo:hi] for lo, hi in zip(offsets[:-1], offsets[1:])
  ] + [None]


def route_layer(
    ut: SparseUT,
    z_BxTxM: jax.Array,
    *,
    causal: bool,
    precision=transformer.HIGHEST,
    z_query: Optional[jax.Array] = None,
) -> jax.Array:
  """One UT attention layer on a flat state: sum_h A_h Z R_V[h], (B, T, m).

  With z_query (B, Q, m), the last Q rows of z, only their rows: (B, Q, m).
  """
  h = ut.num_heads
  slices = level_slices(ut)
  levels = [z_BxTxM[..., s] for s in slices]
  query0 = None if z_query is None else z_query[..., slices[0]]
  new = route_levels(
      ut, levels, causal=causal, precision=precision, query0=query0
  )
  q = z_BxTxM.shape[1] if z_query is None else z_query.shape[1]
  return jnp.concatenate(
      [
          jnp.zeros_like(z[:, z.shape[1] - q :])
          if n is None
          else pad_roles(n, z.shape[-1], h**j)
          for j, (z, n) in enumerate(zip(levels, new))
      ],
      axis=-1,
  )


ORDERS = ("paths", "levels")


def sparse_apply(
    ut: SparseUT,
    embed_DxM: jax.Array,
    x_BxTxD: jax.Array,
    *,
    causal: bool,
    residual: bool,
    readout=None,
    precision=transformer.HIGHEST,
    order: str = "paths",
    last_only: bool = False,
) -> jax.Array:
  """UT(X, E) without any m x m matrix; returns Z_L U (B, T, d) (@ readout).

  order="paths" (`_apply_paths`) routes X along head strings and reads
  level 0 from E, so no level wider than the root is built; X may have any
  width D (E is (D, m)). order="levels" (`_apply_levels`) routes the levels
  of the m-wide state (`route_levels`; D = d). Both compute the same
  function (up to float rounding). With D = d the paths do fewer
  multiply-adds (benchmarks/sparse_bench.py times both); for a wide X
  (one-hot tokens and positions) count them
  (`ut.cpu.sparse_forms.sparse_string_costs`). With last_only, the last row's
  output alone, (B, 1, d): the paths route only its query in the last layer.
  """
  if order not in ORDERS:
    raise ValueError(f"order={order!r}; use one of {ORDERS}")
  if order == "levels" and x_BxTxD.shape[-1] != ut.width:
    raise ValueError(
        f"order='levels' needs X of the block width d = {ut.width}, got "
        f"{x_BxTxD.shape[-1]}; order='paths' takes any width"
    )
  kw = dict(causal=causal, residual=residual, precision=precision)
  if order == "paths":
    y = _apply_paths(ut, embed_DxM, x_BxTxD, last_only=last_only, **kw)
  else:
    y = _apply_levels(ut, embed_DxM, x_BxTxD, **kw)
    y = y[:, -1:] if last_only else y
  if readout is not None:
    y = jnp.einsum("btd,do->bto", y, readout, precision=precision)
  return y


def _apply_paths(
    ut, embed_DxM, x_BxTxD, *, causal, residual, precision, last_only=False
):
  """The UT's state root by routing X along head strings.

  Given the attention weights every block is linear in X. Without
  residual, after l layers the root block of role r holds
  sum_u A_l[u_l] ... A_1[u_1] X E_(r, u) over the head strings u of length l
  (`route_levels` consumes a string's first symbol first). So this keeps
  paths[k] = A_k[u_k] ... A_1[u_1] X for every u of length k, as one
  (B, D H^k, T) array (D: X's width) with rows (i, u_1, ..., u_k): one
  routing step is one batched matmul whose output rows (rows of paths[k],
  head) are the rows of paths[k+1]. The root is paths[k] against E's
  level-k columns, (D, H^k, roles, d) reshaped to (D H^k, roles d), the same
  row order.
  With residual a block may also stay put, so paths of every length
  k <= l are kept, each summed over the layers where it was routed. The
  last layer reads level 1's state blocks from the paths and routes only
  those. No state wider than (1 + H) d is built: layer l costs
  O(B T D H^l (T + (1 + H) d)), against O(B T^2 m) for the levels.
  """
  h, num_layers, d = ut.num_heads, ut.num_layers, ut.width
  b, t, d_in = x_BxTxD.shape
  e_levels = [embed_DxM[:, s] for s in level_slices(ut)]
  paths = {0: jnp.swapaxes(x_BxTxD, 1, 2)}
  for layer in range(num_layers):
    level0 = sum(
        jnp.einsum(
            "bkt,kf->btf",
            p,
            e_levels[k].reshape(d_in * h**k, -1)[:, : (1 + h) * d],
            precision=precision,
        )
        for k, p in paths.items()
    )
    last = layer == num_layers - 1
    a_BxHxTxS = root_attention(
        ut,
        level0,
        causal=causal,
        precision=precision,
        query0=level0[:, -1:] if last and last_only else None,
    )
    if last:
      # Level 1's state block (s, g) gets E's level-k+1 blocks (s, u.g).
      level1_BxTxHxd = sum(
          jnp.einsum(
              "bkt,kgf->btgf",
              p,
              e_levels[k + 1].reshape(d_in * h**k, h, -1)[..., :d],
              precision=precision,
          )
          for k, p in paths.items()
      )
      y = jnp.einsum(
          "bgts,bsgf->btf", a_BxHxTxS, level1_BxTxHxd, precision=precision
      )
      if residual:
        y = y + level0[:, -y.shape[1] :, :d]
      return y
    a_BxNxS = a_BxHxTxS.reshape(b, h * t, t)  # Rows (head, query).
    routed = {}
    for k, p in paths.items():
      r = jnp.einsum("bks,bns->bkn", p, a_BxNxS, precision=precision)
      routed[k + 1] = r.reshape(b, -1, t)  # Rows (rows of p, head).
    if residual:
      for k, p in paths.items():
        routed[k] = routed[k] + p if k in routed else p
    paths = routed


def _apply_levels(ut, embed_DxM, x_BxTxD, *, causal, residual, precision):
  """The UT's state root by block routing of the m-wide state's levels.

  The state is kept as one array per level, (B, T, F_j) with
  F_j = roles * H^j * d, so that no m-wide activation is ever sliced or
  concatenated; a level known to be zero is None and is skipped, and the
  first layer never builds X E (`_first_layer`).
  """
  h = ut.num_heads
  level0, new = _first_layer(
      ut, embed_DxM, x_BxTxD, causal=causal, precision=precision
  )
  if residual:
    levels = [level0] + [
        jnp.einsum("btd,df->btf", x_BxTxD, embed_DxM[:, s], precision=precision)
        for s in level_slices(ut)[1:]
    ]
  for layer in range(ut.num_layers):
    if layer:
      new = route_levels(ut, levels, causal=causal, precision=precision)
    if residual:
      levels = [
          z if n is None else z + pad_roles(n, z.shape[-1], h**j)
          for j, (z, n) in enumerate(zip(levels, new))
      ]
    else:  # Without residuals the deepest levels empty out, one per layer.
      levels = new
  return levels[0][:, :, : ut.width]
