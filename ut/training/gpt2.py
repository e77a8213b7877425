"""Zhong & Andreas's GPT-2 (DESIGN §7): the model their Dyck finding is about.

Zhong & Andreas (2024) froze a randomly initialised GPT-2 (HF GPT2LMHeadModel)
and trained only its token embedding, position embedding and output head. This
module builds that machine as a model of its own, beside the UTs of
`ut.training.models` (which have no W_O and m-wide values: a different
machine). Two kinds:

  gpt2_random  every weight frozen at its GPT-2 init except embed/token,
               embed/position and unembed (their random model);
  gpt2         every weight trains (their trained model).

Layout (their configuration: d = 16, 4 heads of width 4, 2 layers, MLP 64):
pre-LN blocks z += Attn(LN1(z)); z += MLP(LN2(z)), then a final LayerNorm;
LayerNorms with a scale and a bias (eps 1e-5); attention and MLP with biases;
the MLP is fc -> tanh-approximated GELU -> proj; learned position embeddings;
an untied head; no dropout. Init as GPT-2's: every kernel and embedding
N(0, 0.02^2), the two output projections of each block (attn/proj, mlp/proj)
N(0, (0.02 / sqrt(2 L))^2), biases 0, LayerNorm scale 1 and bias 0.

Parameters (shapes for width d, L layers, F = mlp width, K = d / H):
  embed/token (V, d), embed/position (T_max, d), unembed (d, C)   trainable
  blocks/{ln1,ln2}/{scale,bias} (L, d)
  blocks/attn/qkv/kernel (L, d, 3d), bias (L, 3d)   q | k | v, heads contiguous
  blocks/attn/proj/kernel (L, d, d), bias (L, d)
  blocks/mlp/fc/kernel (L, d, F), bias (L, F)
  blocks/mlp/proj/kernel (L, F, d), bias (L, d)
  ln_f/{scale,bias} (d,)
`decay_mask` marks the leaves AdamW decays in their optimiser (HF Trainer: all
but biases and LayerNorm parameters).

Our choices where their model meets our tasks:
  - The head scores our task's classes (Dyck: 2), where theirs scores all 4
    tokens and reads ')' as balanced, '(' as not; and our position table has
    T = 61 rows, theirs 80 (63 read). Trainable: 1,072 parameters, theirs
    1,408.
  - Our Dyck rows are left-padded (the query last); theirs start at position
    0 and are padded on the right. With spec.left_pad >= 0 (Dyck's PAD),
    `apply` gives each string the positions 0, 1, ... and masks the pads, so
    every string position computes what it would in their layout.
  - The frozen weights of gpt2_random come from spec.ut_seed (each seed a new
    machine, as for the random UT); E and U from the run's key.
"""

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import targets
from ut.errors import UserError

KINDS = ("gpt2", "gpt2_random")
INIT_STD = 0.02
LN_EPS = 1e-5


def check_spec(spec):
  """A UserError unless spec fits GPT-2's layout and init."""
  if spec.variant != "res_ln_mlp":
    raise UserError(
        f"model.kind={spec.kind} is GPT-2's layout (residual, LayerNorm, "
        f"MLP); use model.variant=res_ln_mlp, not {spec.variant!r}"
    )
  if spec.width % spec.num_heads:
    raise UserError(
        f"model.width={spec.width} must be a multiple of model.num_heads="
        f"{spec.num_heads} (GPT-2 splits the width into the heads)"
    )
  if spec.head_width * spec.num_heads != spec.width or spec.embed_scale != 1:
    raise UserError(
        f"model.kind={spec.kind} has heads of width model.width / "
        f"model.num_heads and GPT-2's init: use model.head_width="
        f"{spec.width // spec.num_heads} and model.embed_scale=1.0, not "
        f"{spec.head_width} and {spec.embed_scale}"
    )


def _normal(key, shape, std, dtype):
  return std * targets.normal(key, shape, dtype)


def _ln(num_layers, d, dtype):
  return {
      "scale": jnp.ones((num_layers, d), dtype),
      "bias": jnp.zeros((num_layers, d), dtype),
  }


def _dense(key, num_layers, n_in, n_out, std, dtype):
  return {
      "kernel": _normal(key, (num_layers, n_in, n_out), std, dtype),
      "bias": jnp.zeros((num_layers, n_out), dtype),
  }


def init(key, spec, dtype=jnp.float32):
  """GPT-2's initial parameters (module docstring) for a gpt2 kind."""
  d, num_layers, f = spec.width, spec.num_layers, spec.mlp_hidden_width
  k_tok, k_pos, k_u, k_blocks = jax.random.split(key, 4)
  if spec.kind == "gpt2_random":
    k_blocks = jax.random.PRNGKey(spec.ut_seed)
  k_qkv, k_attn, k_fc, k_proj = jax.random.split(k_blocks, 4)
  out_std = INIT_STD / np.sqrt(2 * num_layers)
  return {
      "embed": {
          "token": _normal(k_tok, (spec.vocab_size, d), INIT_STD, dtype),
          "position": _normal(k_pos, (spec.max_len, d), INIT_STD, dtype),
      },
      "blocks": {
          "ln1": _ln(num_layers, d, dtype),
          "attn": {
              "qkv": _dense(k_qkv, num_layers, d, 3 * d, INIT_STD, dtype),
              "proj": _dense(k_attn, num_layers, d, d, out_std, dtype),
          },
          "ln2": _ln(num_layers, d, dtype),
          "mlp": {
              "fc": _dense(k_fc, num_layers, d, f, INIT_STD, dtype),
              "proj": _dense(k_proj, num_layers, f, d, out_std, dtype),
          },
      },
      "ln_f": {"scale": jnp.ones((d,), dtype), "bias": jnp.zeros((d,), dtype)},
      "unembed": _normal(k_u, (d, spec.num_classes), INIT_STD, dtype),
  }


def decay_mask(params):
  """True for the leaves their AdamW decays: kernels, embeddings and the head
  (HF Trainer decays every parameter but biases and LayerNorm weights)."""

  def decayed(path, _):
    names = [p.key for p in path]
    return names[0] in ("embed", "unembed") or names[-1] == "kernel"

  return jax.tree_util.tree_map_with_path(decayed, params)


def _lead(a, x):
  """a (..., N) with leading axes of length 1 to broadcast against x."""
  return a.reshape((1,) * (x.ndim - a.ndim) + a.shape)


def layer_norm(z, scale, bias):
  mean = z.mean(axis=-1, keepdims=True)
  var = jnp.square(z - mean).mean(axis=-1, keepdims=True)
  return (z - mean) / jnp.sqrt(var + LN_EPS) * _lead(scale, z) + _lead(bias, z)


def _dense_apply(p, x, precision):
  y = jnp.einsum("...i,io->...o", x, p["kernel"], precision=precision)
  return y + _lead(p["bias"], y)


def attention(p, x_BxTxD, allowed_BxQxT, num_heads, precision=None, query=None):
  """GPT-2's multi-head self-attention with its output projection; query
  attends to key s where allowed_BxQxT[b, q, s]. query=Q: the last Q rows'
  outputs only, (B, Q, D) (their keys and values from every row)."""
  b, t, d = x_BxTxD.shape
  k = d // num_heads
  qkv = _dense_apply(p["qkv"], x_BxTxD, precision)
  q, kk, v = (
      a.reshape(b, t, num_heads, k) for a in jnp.split(qkv, 3, axis=-1)
  )
  if query is not None:
    q = q[:, -query:]
  scores = jnp.einsum("bqhk,bshk->bhqs", q, kk, precision=precision)
  scores = scores / np.sqrt(k)
  scores = jnp.where(
      allowed_BxQxT[:, None], scores, jnp.finfo(scores.dtype).min
  )
  weights = jax.nn.softmax(scores, axis=-1)
  heads = jnp.einsum("bhqs,bshk->bqhk", weights, v, precision=precision)
  return _dense_apply(p["proj"], heads.reshape(b, q.shape[1], d), precision)


def mlp(p, x, precision=None):
  hidden = jax.nn.gelu(_dense_apply(p["fc"], x, precision), approximate=True)
  return _dense_apply(p["proj"], hidden, precision)


def _left_pads(tokens_BxT, pad):
  """Per row, how many pad tokens it starts with (rows: [pad...pad, string])."""
  return jnp.sum(jnp.cumprod(tokens_BxT == pad, axis=1), axis=1)


def apply(params, spec, tokens_BxT, precision=None, last_only=False):
  """Logits (B, T, C) for token ids (B, T); last_only: the last position's
  only, (B, 1, C), with the last layer's queries, attention, MLP and head
  computed for that row alone.

  With spec.left_pad >= 0, a row's string is read as in Zhong & Andreas's
  layout, from position 0 on: its tokens take the positions 0, 1, ... after
  its left pads, and no query attends to a pad. Every string position's
  logits then equal those of the string alone, unpadded; the pad positions'
  logits mean nothing.
  """
  b, t = tokens_BxT.shape
  pads = jnp.zeros((b,), jnp.int32)
  if spec.left_pad >= 0:
    pads = _left_pads(tokens_BxT, spec.left_pad)
  index = jnp.arange(t)
  positions = jnp.maximum(index[None] - pads[:, None], 0)
  z = params["embed"]["token"][tokens_BxT] + params["embed"]["position"][positions]
  keys_ok = index[None] >= pads[:, None]  # (B, T): not a pad.
  allowed = (index[None, :, None] >= index[None, None, :]) & keys_ok[:, None]
  blocks = params["blocks"]
  for layer in range(spec.num_layers):
    p = jax.tree.map(lambda a: a[layer], blocks)
    query = 1 if last_only and layer == spec.num_layers - 1 else None
    if query:
      allowed = allowed[:, -1:]
    a = attention(
        p["attn"],
        layer_norm(z, **p["ln1"]),
        allowed,
        spec.num_heads,
        precision,
        query,
    )
    z = (z[:, -1:] if query else z) + a
    z = z + mlp(p["mlp"], layer_norm(z, **p["ln2"]), precision)
  z = layer_norm(z, **params["ln_f"])
  return jnp.einsum("btd,dc->btc", z, params["unembed"], precision=precision)
