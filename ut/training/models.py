"""Models for training: three kinds by three variants (DESIGN §7).

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width (m for
a UT, d for a trained transformer), H heads, L layers, K head width, F MLP width.

Kinds:
  sparse   the tree-routing UT of a virtual target (H, L, d); m = sparse width;
           structured routing, no attention weights at all.
  random   a Gaussian UT of width m (`constructions.gaussian`), frozen.
  trained  a standard transformer of width d; every weight trains.
Variants:
  attn        attention only, exactly DESIGN §1: z_l = sum_h A_h z_{l-1} V_h.
  res_ln      pre-LN residual: z_l = z_{l-1} + Attn(LN(z_{l-1})), and a final LN.
  res_ln_mlp  adds z_l += MLP(LN(z_l)) per layer (frozen random in UTs).
LayerNorm has no parameters in any kind (our choice: it keeps UTs honest and the
trained baseline comparable).

Parameters (plain nested dict):
  embed/token (V, M), embed/position (T_max, M), unembed (M, C)      trainable
  layers/wq, layers/wk (Lp, H, M, K), layers/wv (Lp, H, M, K or M),
  layers/wo (Lp, H, K, M) (trained only)                             frozen in UTs
  mlp/w1 (L, M, F), mlp/b1 (L, F), mlp/w2 (L, F, M), mlp/b2 (L, M)   frozen in UTs
`labels(params, spec)` gives every leaf exactly one of 'train' / 'frozen'.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import bounds
from ut.core import targets
from ut.core import transformer
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError

KINDS = ("sparse", "random", "trained")
VARIANTS = ("attn", "res_ln", "res_ln_mlp")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """Static description of a model (hashable: safe as a jit static argument)."""
  kind: str
  variant: str
  vocab_size: int
  max_len: int
  num_classes: int
  num_heads: int = 2
  num_layers: int = 2
  width: int = 16          # d: virtual target width (sparse) or model width (trained).
  m: int = 256             # random: UT width.
  head_width: int = 32     # random: k_u; trained: k per head.
  mlp_ratio: int = 2
  mlp_width: int = 0       # F, the MLP's hidden width; 0: mlp_ratio * M.
  causal: bool = True
  ut_seed: int = 0         # random: seed of the frozen weights.
  shared: bool = False     # random: one set of weights for every layer.
  embed_scale: float = 1.0  # Std of E's initial entries (token and position).

  def __post_init__(self):
    if self.kind not in KINDS:
      raise UserError(f"unknown model kind {self.kind!r}; use one of {KINDS}")
    if self.variant not in VARIANTS:
      raise UserError(f"unknown variant {self.variant!r}; use one of {VARIANTS}")
    for name in ("vocab_size", "max_len", "num_classes", "num_heads",
                 "num_layers", "width", "m", "head_width", "mlp_ratio"):
      v = getattr(self, name)
      if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise UserError(f"model.{name}={v!r} must be a positive integer")
    if (not isinstance(self.embed_scale, (int, float, np.number))
        or isinstance(self.embed_scale, bool)
        or not 0 < self.embed_scale < np.inf):
      raise UserError(f"model.embed_scale={self.embed_scale!r} must be a "
                      "positive number (the std of E's initial entries, e.g. 1.0)")
    targets.check_seed(self.ut_seed, "model.ut_seed")
    if (not isinstance(self.mlp_width, (int, np.integer))
        or isinstance(self.mlp_width, bool) or self.mlp_width < 0):
      raise UserError(f"model.mlp_width={self.mlp_width!r} must be a positive "
                      "integer, or 0 for mlp_ratio * model width")

  @property
  def model_width(self):
    if self.kind == "sparse":
      return bounds.sparse_width(self.num_heads, self.num_layers, self.width)
    return self.m if self.kind == "random" else self.width

  @property
  def mlp_hidden_width(self):
    """F: mlp_width, or mlp_ratio times the model width when that is 0."""
    return self.mlp_width or self.mlp_ratio * self.model_width

  @property
  def residual(self):
    return self.variant != "attn"

  @property
  def sparse_ut(self):
    return _sparse_ut(self.num_heads, self.num_layers, self.width)


@functools.lru_cache(maxsize=16)
def _sparse_ut(num_heads, num_layers, width):
  return sparse.make_sparse_ut(num_heads, num_layers, width)


def init(key, spec, dtype=jnp.float32):
  """Initial parameters. UT weights come from the construction builders."""
  m, c = spec.model_width, spec.num_classes
  k_tok, k_pos, k_u, k_layers, k_mlp = jax.random.split(key, 5)
  params = {
      "embed": {
          "token": spec.embed_scale * jax.random.normal(
              k_tok, (spec.vocab_size, m), dtype),
          "position": spec.embed_scale * jax.random.normal(
              k_pos, (spec.max_len, m), dtype),
      },
      "unembed": jax.random.normal(k_u, (m, c), dtype) / np.sqrt(m),
  }
  h, num_layers, k = spec.num_heads, spec.num_layers, spec.head_width
  if spec.kind == "random":
    ut = gaussian.make_gaussian_ut(h, num_layers, m, k, spec.ut_seed,
                                   shared=spec.shared, dtype=np.float32)
    params["layers"] = {name: jnp.asarray(ut[name], dtype)
                        for name in ("wq", "wk", "wv")}
  elif spec.kind == "trained":
    ks = jax.random.split(k_layers, 4)
    normal = lambda key, shape, fan_in: (jax.random.normal(key, shape, dtype)
                                         / np.sqrt(fan_in))
    params["layers"] = {
        "wq": normal(ks[0], (num_layers, h, m, k), m),
        "wk": normal(ks[1], (num_layers, h, m, k), m),
        "wv": normal(ks[2], (num_layers, h, m, k), m),
        "wo": normal(ks[3], (num_layers, h, k, m), k * h),
    }
  if spec.variant == "res_ln_mlp":
    f = spec.mlp_hidden_width
    k1, k2 = jax.random.split(k_mlp)
    if spec.kind != "trained":  # Frozen random MLP: its own fixed seed.
      k1, k2 = jax.random.split(jax.random.PRNGKey(spec.ut_seed + 1))
    params["mlp"] = {
        "w1": jax.random.normal(k1, (num_layers, m, f), dtype) / np.sqrt(m),
        "b1": jnp.zeros((num_layers, f), dtype),
        "w2": jax.random.normal(k2, (num_layers, f, m), dtype) / np.sqrt(f),
        "b2": jnp.zeros((num_layers, m), dtype),
    }
  return params


def labels(params, spec):
  """'train' or 'frozen' for every leaf, from its path (STYLE 7)."""
  trainable = ("embed", "unembed") if spec.kind != "trained" else None

  def label(path, _):
    top = path[0].key
    return "train" if trainable is None or top in trainable else "frozen"

  out = jax.tree_util.tree_map_with_path(label, params)
  leaves = jax.tree.leaves(out)
  assert len(leaves) == len(jax.tree.leaves(params)), "a leaf has no label"
  assert set(leaves) <= {"train", "frozen"}, set(leaves)
  return out


def layer_norm(z, eps=1e-5):
  """Parameter-free LayerNorm over the last axis."""
  mean, inv = _level_stats([z], eps)
  return (z - mean) * inv


def token_embed(tokens_BxT, table_VxM, precision=None):
  """Rows of the token table, (B, T, M), as a one-hot matmul.

  Its gradient is then a matmul too, where a gather's is a scatter-add, which
  is slow on CPU; `transformer.batched_matmul` makes it onehot^T @ dZ from a
  (V, B T) copy of the one-hot (XLA CPU otherwise transposes dZ and runs a
  generic kernel: 25x slower at B T = 16384, M = 256).
  """
  b, t = tokens_BxT.shape
  onehot_NxV = jax.nn.one_hot(tokens_BxT.reshape(b * t), table_VxM.shape[0],
                              dtype=table_VxM.dtype)
  return transformer.batched_matmul(onehot_NxV, table_VxM,
                                    precision).reshape(b, t, -1)


def embed(params, tokens_BxT, precision=None):
  """E: token table plus position table, (B, T, M)."""
  t = tokens_BxT.shape[1]
  return (token_embed(tokens_BxT, params["embed"]["token"], precision)
          + params["embed"]["position"][:t][None])


def attention(params, spec, z_BxTxM, layer, precision=None):
  """One attention layer (no residual) of the configured kind."""
  if spec.kind == "sparse":
    return sparse.route_layer(spec.sparse_ut, z_BxTxM, causal=spec.causal,
                              precision=precision)
  return transformer.attention_layer(
      z_BxTxM, *transformer.layer_params(params["layers"], layer),
      causal=spec.causal, precision=precision)


def _random_first_layer(params, spec, tokens_BxT, z_BxTxM, precision):
  """Layer 1 of the random UT (no residual), from the tables.

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
  batch: the fixed-size benchmark step 1.33x as fast as with the values
  formed (one device, XLA's defaults). `transformer.attention_layer` computes
  the same (tested equal, gradients too).
  """
  b, t = tokens_BxT.shape
  v = spec.vocab_size
  wq, wk, wv, _ = transformer.layer_params(params["layers"], 0)
  ln = spec.variant != "attn"
  stats = _level_stats([z_BxTxM]) if ln else None
  x_BxTxM = (z_BxTxM - stats[0]) * stats[1] if ln else z_BxTxM
  a_BxHxTxS = transformer.attention_maps(x_BxTxM, wq, wk, causal=spec.causal,
                                         precision=precision)
  cols_BxSxV = jax.nn.one_hot(tokens_BxT, v, dtype=z_BxTxM.dtype)
  rows_HxVxM = jnp.einsum("vm,hmn->hvn", params["embed"]["token"], wv,
                          precision=precision)
  if ln:
    mean_BxSx1, inv_BxSx1 = stats
    a_BxHxTxS = a_BxHxTxS * inv_BxSx1[:, None, None, :, 0]
    cols_BxSxV = jnp.concatenate([cols_BxSxV, mean_BxSx1], axis=-1)
    rows_HxVxM = jnp.concatenate([rows_HxVxM, -wv.sum(1)[:, None]], axis=1)
  pos_HxSxM = jnp.einsum("sm,hmn->hsn", params["embed"]["position"][:t], wv,
                         precision=precision)
  c_BxTxHxV = jnp.einsum("bhts,bsv->bthv", a_BxHxTxS, cols_BxSxV,
                         precision=precision)
  # One merge per reshape: a reshape that merges two pairs of axes fails on
  # sharded (swept) runs.
  lhs = jnp.concatenate([a_BxHxTxS.transpose(0, 2, 1, 3), c_BxTxHxV],
                        axis=-1).reshape(b, t, -1).reshape(b * t, -1)
  rhs = jnp.concatenate([pos_HxSxM, rows_HxVxM], axis=1)
  return transformer.batched_matmul(lhs, rhs.reshape(-1, rhs.shape[-1]),
                                    precision).reshape(b, t, -1)


def _level_stats(levels, eps=1e-5):
  """LayerNorm's mean and 1/std, (B, T, 1), of the concatenation of `levels`.

  The row sums are matmuls with a ones vector: XLA CPU runs them in its dot
  library, faster than its reduce (measured on one core: the trained k-hop
  k = 4 step with res_ln_mlp 21.6 -> 10.0 ms, the sparse UT's with res_ln
  89 -> 69-77 ms). They run at HIGHEST precision: a reduce is exact in float32,
  but a default-precision matmul rounds its inputs to bfloat16 on TPU (and to
  TF32 on recent GPUs); at HIGHEST they match the reduce's LayerNorm there too,
  at no cost on CPU, which computes float32 dots in full either way.
  """
  m = sum(z.shape[-1] for z in levels)
  rowsum = lambda x: jnp.matmul(x, jnp.ones((x.shape[-1], 1), x.dtype),
                                precision=jax.lax.Precision.HIGHEST)
  mean = sum(rowsum(z) for z in levels) / m
  var = sum(rowsum(jnp.square(z - mean)) for z in levels) / m
  return mean, jax.lax.rsqrt(var + eps)


def _normed_matmul(levels, rows, stats, precision):
  """layer_norm(concat(levels)) @ concat(rows), without the normalised state.

  LN(z) W = inv (z W - mean 1^T W): one pass over the m-wide state and no
  m-wide temporary (the state is memory-bound; see `_apply_sparse`).
  """
  mean, inv = stats
  zw = sum(jnp.einsum("btm,mf->btf", z, w[:z.shape[-1]], precision=precision)
           for z, w in zip(levels, rows) if z is not None)
  colsum = sum(w[:z.shape[-1]].sum(0) for z, w in zip(levels, rows)
               if z is not None)
  return inv * (zw - mean * colsum[None, None])


def _string_major(ut, w, axis=-1):
  """w's axis of width m as per-level parts, each reordered to (string, role, d).

  `sparse` orders the blocks of a level by (role, string); by string first (its
  first symbol most significant) routing level j+1 into level j is a reshape
  and one matmul per level, with no transpose of the state.
  """
  h, num_layers, d = ut.num_heads, ut.num_layers, ut.width
  w = jnp.moveaxis(w, axis, -1)
  out = []
  for j, s in enumerate(sparse.level_slices(ut)):
    roles = sparse.level_roles(h, num_layers, j)
    part = w[..., s].reshape(*w.shape[:-1], roles, h**j, d).swapaxes(-3, -2)
    out.append(jnp.moveaxis(part.reshape(*w.shape[:-1], -1), -1, axis))
  return out


def _route_string_major(ut, levels, *, causal, precision, stats=None):
  """`sparse.route_levels` for levels in `_string_major` order.

  A level may hold only the leading roles of each string (the leaves route out
  their state role alone); what it routes into the level above then does too.
  With stats = (mean, inv) from `_level_stats` it routes the LayerNorm of the
  levels without forming it: A LN(z) = (A diag(inv)) z - A (mean inv) 1^T.
  """
  h = ut.num_heads
  b, t = levels[0].shape[:2]
  root = levels[0] if stats is None else (levels[0] - stats[0]) * stats[1]
  a_BxHxTxT = sparse._root_attention(  # pylint: disable=protected-access
      ut, root, causal=causal, precision=precision)
  # Columns (s, g): level j+1's rows (s, g.t') are then a reshape.
  a_BxTxTxH = a_BxHxTxT.transpose(0, 2, 3, 1)
  shift_BxTx1 = 0.0
  if stats is not None:
    mean_BxTx1, inv_BxTx1 = stats
    shift_BxTx1 = jnp.einsum("btsh,bs->bt", a_BxTxTxH,
                             (mean_BxTx1 * inv_BxTx1)[..., 0],
                             precision=precision)[..., None]
    a_BxTxTxH = a_BxTxTxH * inv_BxTx1[:, None]
  routed = [j for j in range(ut.num_layers) if levels[j + 1] is not None]
  # Split, then merge: a reshape that does both fails on sharded (swept) runs.
  out = transformer.batched_matmul(
      a_BxTxTxH.reshape(b, t, t * h),
      [levels[j + 1].reshape(b, t, h, -1).reshape(b, t * h, -1) for j in routed],
      precision)
  new = {j: o - shift_BxTx1 for j, o in zip(routed, out)}
  return [new.get(j) for j in range(ut.num_layers)] + [None]


def _add_roles(z_BxTxF, n_BxTxF, strings):
  """z + n, where n holds only the leading roles of each of z's strings."""
  if n_BxTxF.shape[-1] == z_BxTxF.shape[-1]:
    return z_BxTxF + n_BxTxF
  b, t, f = z_BxTxF.shape
  n = n_BxTxF.reshape(b, t, strings, -1)
  n = jnp.pad(n, ((0, 0), (0, 0), (0, 0), (0, f // strings - n.shape[-1])))
  return z_BxTxF + n.reshape(b, t, f)


def _mlp_string_major(ut, mlp, levels, precision):
  """z + MLP(LN(z)) for levels in `_string_major` order, as one m-wide array.

  The MLP reads and writes every level, so it runs on their concatenation:
  one matmul each way instead of one per level, and the LayerNorm of the whole
  state in one pass. Measured on one core (k-hop k = 4, m = 4000, F = 32, a
  128-token microbatch, 5 layers forward and backward): 12.6 ms against 29.8 ms
  per level. LN(z) W1 is `_normed_matmul`, with no normalised copy of z: the
  whole k-hop step 0.89x (k = 3) and 0.92x (k = 4) the time with one, side by
  side on one core; Dyck unchanged.
  """
  z = jnp.concatenate(levels, axis=-1)
  w1, w2, b2 = (jnp.concatenate(_string_major(ut, w, axis), axis=axis)
                for w, axis in ((mlp["w1"], 0), (mlp["w2"], -1),
                                (mlp["b2"], -1)))
  hidden = jax.nn.gelu(_normed_matmul([z], [w1], _level_stats([z]), precision)
                       + mlp["b1"][None, None])
  z = (z + jnp.einsum("btf,fm->btm", hidden, w2, precision=precision)
       + b2[None, None])
  return jnp.split(z, np.cumsum([zj.shape[-1] for zj in levels])[:-1], axis=-1)


def _apply_sparse(params, spec, tokens_BxT, precision):
  """`apply` for the sparse kind with the state kept as one array per level.

  The same computation as the flat path (tested equal), but no m-wide array is
  sliced or concatenated per layer, and levels are stored string-major
  (`_string_major`: E, the MLP and U are permuted to match), so routing moves
  no data but the matmuls'. The parameter-free LayerNorm is folded into what
  reads it (`_route_string_major`, `_normed_matmul`): no normalised copy of the
  m-wide state is formed (the sparse step is memory-bound).
  """
  ut = spec.sparse_ut
  h = ut.num_heads
  t = tokens_BxT.shape[1]
  z = [token_embed(tokens_BxT, e, precision) + p[:t][None] for e, p in zip(
      _string_major(ut, params["embed"]["token"]),
      _string_major(ut, params["embed"]["position"]))]
  ln = spec.variant != "attn"
  for layer in range(spec.num_layers):
    new = _route_string_major(ut, z, causal=spec.causal, precision=precision,
                              stats=_level_stats(z) if ln else None)
    if spec.residual:
      z = [zj if n is None else _add_roles(zj, n, h**j)
           for j, (zj, n) in enumerate(zip(z, new))]
    else:
      z = new
    if spec.variant == "res_ln_mlp":
      z = _mlp_string_major(ut, jax.tree.map(lambda w: w[layer], params["mlp"]),
                            z, precision)
  rows = _string_major(ut, params["unembed"], axis=0)
  if ln:
    return _normed_matmul(z, rows, _level_stats(z), precision)
  return sum(jnp.einsum("btm,mc->btc", zj, u[:zj.shape[-1]], precision=precision)
             for zj, u in zip(z, rows) if zj is not None)


def apply(params, spec, tokens_BxT, precision=None, structured=True):
  """Logits (B, T, C) for token ids (B, T).

  structured=False runs the sparse kind on the flat m-wide state (the reference
  for the per-level path), and the random kind's first layer as every other
  (the reference for `_random_first_layer`).
  """
  if tokens_BxT.shape[1] > spec.max_len:
    raise UserError(f"sequence length {tokens_BxT.shape[1]} exceeds the model's "
                    f"position table ({spec.max_len})")
  if spec.kind == "sparse" and structured:
    return _apply_sparse(params, spec, tokens_BxT, precision)
  z = embed(params, tokens_BxT, precision)
  ln = spec.variant != "attn"
  for layer in range(spec.num_layers):
    if layer == 0 and spec.kind == "random" and structured:
      a = _random_first_layer(params, spec, tokens_BxT, z, precision)
    else:
      a = attention(params, spec, layer_norm(z) if ln else z, layer, precision)
    z = z + a if spec.residual else a
    if spec.variant == "res_ln_mlp":
      mlp = jax.tree.map(lambda w: w[layer], params["mlp"])
      hidden = jax.nn.gelu(jnp.matmul(layer_norm(z), mlp["w1"], precision=precision)
                           + mlp["b1"][None, None])
      z = (z + jnp.matmul(hidden, mlp["w2"], precision=precision)
           + mlp["b2"][None, None])
  if ln:
    z = layer_norm(z)
  return unembed(z, params["unembed"], precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def unembed(z_BxTxM, u_MxC, precision=None):
  """z @ U, (B, T, C), with a gradient XLA CPU runs fast for few classes.

  Autodiff's dz = g U^T is a dot contracting over C (2 for Dyck), which XLA
  CPU runs at a small fraction of its speed; for C <= 8 it is C broadcast
  multiply-adds here. dU = (g^T z)^T keeps z untransposed. Together 1-3% of the
  fixed-size step (m = 256, C = 2).
  """
  return jnp.einsum("btm,mc->btc", z_BxTxM, u_MxC, precision=precision)


def _unembed_fwd(z_BxTxM, u_MxC, precision):
  return unembed(z_BxTxM, u_MxC, precision), (z_BxTxM, u_MxC)


def _unembed_bwd(precision, res, g_BxTxC):
  z_BxTxM, u_MxC = res
  c = u_MxC.shape[1]
  if c <= 8:
    dz = sum(g_BxTxC[..., i:i + 1] * u_MxC[None, None, :, i] for i in range(c))
  else:
    dz = jnp.einsum("btc,mc->btm", g_BxTxC, u_MxC, precision=precision)
  du = jnp.einsum("btc,btm->cm", g_BxTxC, z_BxTxM, precision=precision).T
  return dz, du


unembed.defvjp(_unembed_fwd, _unembed_bwd)
