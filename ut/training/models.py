"""Models for training: three kinds by three variants (DESIGN §7).

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width (m for
a UT, d for a trained transformer), H heads, L layers, K head width, F MLP width.

Kinds:
  sparse   the tree-routing UT of a virtual target (H, L, d); m = sparse width;
           structured routing (`sparse.route_layer`), no attention weights.
  random   a Gaussian UT of width m (`constructions.gaussian`), frozen.
  trained  a standard transformer of width d; every weight trains.
  gpt2, gpt2_random  Zhong & Andreas's GPT-2 layout (`ut.training.gpt2`), with
           every weight trained, or frozen but E and U; variant res_ln_mlp.
Variants:
  attn        attention only, exactly DESIGN §1: z_l = sum_h A_h z_{l-1} V_h.
  res_ln      pre-LN residual: z_l = z_{l-1} + Attn(LN(z_{l-1})), and a final LN.
  res_ln_mlp  adds z_l += MLP(LN(z_l)) per layer (frozen random in UTs).
LayerNorm has no parameters in any kind (our choice: it keeps UTs honest and the
trained baseline comparable).

Parameters (plain nested dict; the sparse kind's M axis in the block order of
`sparse.block_names`):
  embed/token (V, M), embed/position (T_max, M), unembed (M, C)      trainable
  layers/wq, layers/wk (Lp, H, M, K), layers/wv (Lp, H, M, K or M),
  layers/wo (Lp, H, K, M) (trained only)                             frozen in UTs
  mlp/w1 (L, M, F), mlp/b1 (L, F), mlp/w2 (L, F, M), mlp/b2 (L, M)   frozen in UTs
`labels(params, spec)` gives every leaf exactly one of 'train' / 'frozen'.

`apply` below is the textbook computation. ModelSpec.impl selects it
("reference") or the same model restructured for XLA CPU ("xla_cpu",
`ut.cpu.forward`); "auto" picks xla_cpu on a CPU backend. Both take the same
parameters and are tested equal, gradients included. That switch, and how a
training step is sized for XLA CPU, live in `ut.training.implementation`,
which this module owns: the one place where training meets `ut.cpu`.
"""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import bounds
from ut.core import targets
from ut.core import transformer
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError
from ut.training import data as data_lib
from ut.training import gpt2
from ut.training import implementation

KINDS = ("sparse", "random", "trained")  # Each with any of VARIANTS.
ALL_KINDS = KINDS + gpt2.KINDS
VARIANTS = ("attn", "res_ln", "res_ln_mlp")
IMPLS = implementation.IMPLS


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
  width: int = 16  # d: virtual target width (sparse) or model width (trained).
  m: int = 256  # random: UT width.
  head_width: int = 32  # random: k_u; trained: k per head.
  mlp_ratio: int = 2
  mlp_width: int = 0  # F, the MLP's hidden width; 0: mlp_ratio * M.
  causal: bool = True
  ut_seed: int = 0  # random: seed of the frozen weights.
  shared: bool = False  # random: one set of weights for every layer.
  embed_scale: float = 1.0  # Std of E's initial entries (token and position).
  impl: str = "auto"  # "reference", "xla_cpu", or "auto" (by backend).
  # The loss reads the last position only (`apply(..., last_only=True)`):
  # for tasks whose labels all sit there (TaskInfo.labels_last_only).
  last_only: bool = False
  # The token that left-pads rows (TaskInfo.left_pad; -1: none): the gpt2
  # kinds move each row to start at position 0, as Zhong & Andreas's rows do.
  left_pad: int = -1

  def __post_init__(self):
    if self.kind not in ALL_KINDS:
      raise UserError(
          f"unknown model kind {self.kind!r}; use one of {ALL_KINDS}"
      )
    if self.variant not in VARIANTS:
      raise UserError(
          f"unknown variant {self.variant!r}; use one of {VARIANTS}"
      )
    if self.impl not in IMPLS:
      raise UserError(f"unknown model.impl={self.impl!r}; use one of {IMPLS}")
    for name in (
        "vocab_size",
        "max_len",
        "num_classes",
        "num_heads",
        "num_layers",
        "width",
        "m",
        "head_width",
        "mlp_ratio",
    ):
      v = getattr(self, name)
      if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise UserError(f"model.{name}={v!r} must be a positive integer")
    if (
        not isinstance(self.embed_scale, (int, float, np.number))
        or isinstance(self.embed_scale, bool)
        or not 0 < self.embed_scale < np.inf
    ):
      raise UserError(
          f"model.embed_scale={self.embed_scale!r} must be a "
          "positive number (the std of E's initial entries, e.g. 1.0)"
      )
    targets.check_seed(self.ut_seed, "model.ut_seed")
    if self.kind in gpt2.KINDS:
      gpt2.check_spec(self)
    if (
        not isinstance(self.mlp_width, (int, np.integer))
        or isinstance(self.mlp_width, bool)
        or self.mlp_width < 0
    ):
      raise UserError(
          f"model.mlp_width={self.mlp_width!r} must be a positive "
          "integer, or 0 for mlp_ratio * model width"
      )

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


def model_spec(config, task_info: data_lib.TaskInfo) -> ModelSpec:
  """The ModelSpec of a config (its `model` block plus the task's sizes)."""
  mc = config.model
  return ModelSpec(
      kind=mc.kind,
      variant=mc.variant,
      vocab_size=task_info.vocab_size,
      max_len=task_info.max_len,
      num_classes=task_info.num_classes,
      num_heads=mc.num_heads,
      num_layers=mc.num_layers,
      width=mc.width,
      m=mc.m,
      head_width=mc.head_width,
      mlp_ratio=mc.mlp_ratio,
      mlp_width=mc.get("mlp_width", 0),
      causal=mc.causal,
      ut_seed=mc.ut_seed,
      shared=mc.shared,
      embed_scale=mc.get("embed_scale", 1.0),
      impl=mc.get("impl", "auto"),
      last_only=task_info.labels_last_only,
      left_pad=task_info.left_pad,
  )


def cpu_threads(config) -> int | None:
  """XLA CPU's thread pool for a run of `config`, told before JAX starts
  (`implementation.cpu_threads`; launch/train.py asks on CPU only)."""
  task = data_lib.make_task(config)
  shape = data_lib.train_batch(config, task, 0)["tokens"].shape
  return implementation.cpu_threads(
      config, model_spec(config, task.info), shape
  )


@functools.lru_cache(maxsize=16)
def _sparse_ut(num_heads, num_layers, width):
  return sparse.make_sparse_ut(num_heads, num_layers, width)


def init(key, spec, dtype=jnp.float32):
  """Initial parameters. UT weights come from the construction builders."""
  if spec.kind in gpt2.KINDS:
    return gpt2.init(key, spec, dtype)
  m, c = spec.model_width, spec.num_classes
  k_tok, k_pos, k_u, k_layers, k_mlp = jax.random.split(key, 5)
  params = {
      "embed": {
          "token": spec.embed_scale
          * targets.normal(k_tok, (spec.vocab_size, m), dtype),
          "position": spec.embed_scale
          * targets.normal(k_pos, (spec.max_len, m), dtype),
      },
      "unembed": targets.normal(k_u, (m, c), dtype) / np.sqrt(m),
  }
  h, num_layers, k = spec.num_heads, spec.num_layers, spec.head_width
  if spec.kind == "random":
    ut = gaussian.make_gaussian_ut(
        h, num_layers, m, k, spec.ut_seed, shared=spec.shared, dtype=np.float32
    )
    params["layers"] = {
        name: jnp.asarray(ut[name], dtype) for name in ("wq", "wk", "wv")
    }
  elif spec.kind == "trained":
    ks = jax.random.split(k_layers, 4)
    normal = lambda key, shape, fan_in: (
        targets.normal(key, shape, dtype) / np.sqrt(fan_in)
    )
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
        "w1": targets.normal(k1, (num_layers, m, f), dtype) / np.sqrt(m),
        "b1": jnp.zeros((num_layers, f), dtype),
        "w2": targets.normal(k2, (num_layers, f, m), dtype) / np.sqrt(f),
        "b2": jnp.zeros((num_layers, m), dtype),
    }
  if spec.kind == "sparse":
    perm = _sparse_draw_order(spec.sparse_ut)
    take = lambda a, axis: jnp.take(a, perm, axis=axis)
    params["embed"] = {k: take(a, 1) for k, a in params["embed"].items()}
    params["unembed"] = take(params["unembed"], 0)
    if "mlp" in params:
      p = params["mlp"]
      params["mlp"] = dict(
          p, w1=take(p["w1"], 1), w2=take(p["w2"], 2), b2=take(p["b2"], 1)
      )
  return params


def _sparse_draw_order(ut):
  """The sparse kind's draw order: indices that take an M axis from the
  order `init` draws its E, U and MLP in to the block order of
  `sparse.block_names`: new = drawn[..., perm].

  `init` draws a level's blocks by role, then string ((state, s) for every
  s, then (query h, s) for every s, for each h); the model's M axis is by
  string, then role. The draw order is part of what a seed means: drawing in
  the block order directly gives other numbers, so other models and other
  training runs (every sparse result recorded under results/ was drawn so).
  """
  h, num_layers, d = ut.num_heads, ut.num_layers, ut.width
  drawn = []
  for j in range(num_layers + 1):
    strings = list(itertools.product(range(h), repeat=j))
    drawn.extend(("s", s) for s in strings)
    if j < num_layers:
      drawn.extend(("q", g, s) for g in range(h) for s in strings)
  index = {name: i for i, name in enumerate(drawn)}
  blocks = np.array([index[name] for name in sparse.block_names(h, num_layers)])
  return (blocks[:, None] * d + np.arange(d)).reshape(-1)


def labels(params, spec):
  """'train' or 'frozen' for every leaf, from its path (STYLE 7)."""
  trainable = None if spec.kind in ("trained", "gpt2") else ("embed", "unembed")

  def label(path, _):
    top = path[0].key
    return "train" if trainable is None or top in trainable else "frozen"

  out = jax.tree_util.tree_map_with_path(label, params)
  leaves = jax.tree.leaves(out)
  assert len(leaves) == len(jax.tree.leaves(params)), "a leaf has no label"
  assert set(leaves) <= {"train", "frozen"}, set(leaves)
  return out


def decay_mask(params):
  """True for the weights, False for the biases and LayerNorm parameters:
  the leaves that AdamW decays with config.train.decay_on="weights"."""
  if "blocks" in params:  # The gpt2 kinds.
    return gpt2.decay_mask(params)
  return jax.tree_util.tree_map_with_path(
      lambda path, _: path[-1].key not in ("b1", "b2"), params
  )


def layer_norm(z, eps=1e-5):
  """Parameter-free LayerNorm over the last axis."""
  mean = z.mean(axis=-1, keepdims=True)
  var = jnp.square(z - mean).mean(axis=-1, keepdims=True)
  return (z - mean) / jnp.sqrt(var + eps)


def embed(params, tokens_BxT):
  """E: token table rows plus position table rows, (B, T, M)."""
  t = tokens_BxT.shape[1]
  return (
      params["embed"]["token"][tokens_BxT]
      + params["embed"]["position"][:t][None]
  )


def attention(params, spec, z_BxTxM, layer, precision=None, z_query=None):
  """One attention layer (no residual) of the configured kind, (B, T, M); with
  z_query (B, Q, M), the last Q rows of z, only theirs, (B, Q, M)."""
  if spec.kind == "sparse":
    return sparse.route_layer(
        spec.sparse_ut,
        z_BxTxM,
        causal=spec.causal,
        precision=precision,
        z_query=z_query,
    )
  return transformer.attention_layer(
      z_BxTxM,
      *transformer.layer_params(params["layers"], layer),
      causal=spec.causal,
      precision=precision,
      x_query=z_query,
  )


def mlp(params, z_BxTxM, layer, precision=None):
  """MLP(z) of one layer: gelu(z W1 + b1) W2 + b2."""
  w = jax.tree.map(lambda a: a[layer], params["mlp"])
  hidden = jax.nn.gelu(
      jnp.einsum("btm,mf->btf", z_BxTxM, w["w1"], precision=precision)
      + w["b1"][None, None]
  )
  return (
      jnp.einsum("btf,fm->btm", hidden, w["w2"], precision=precision)
      + w["b2"][None, None]
  )


def apply(params, spec, tokens_BxT, precision=None, last_only=False):
  """Logits (B, T, C) for token ids (B, T), by the implementation spec.impl
  selects: the textbook computation below, or `ut.cpu.forward.apply`.

  last_only=True returns the last position's logits only, (B, 1, C): the
  same values as apply(...)[:, -1:] (up to float rounding), for a loss on the
  last position alone (Dyck's '?' query). Every layer but the last runs on
  every row (its rows are the next layer's keys and values); the last layer
  computes its queries, attention, residual, MLP, final LayerNorm and
  unembedding for the last row only, its keys and values still from every
  row. The last row sees every position, so no causal mask applies to it.
  """
  if tokens_BxT.shape[1] > spec.max_len:
    raise UserError(
        f"sequence length {tokens_BxT.shape[1]} exceeds the model's "
        f"position table ({spec.max_len})"
    )
  if spec.kind in gpt2.KINDS:  # One implementation on every backend.
    return gpt2.apply(params, spec, tokens_BxT, precision, last_only)
  if implementation.resolve_impl(spec.impl) == "xla_cpu":
    return implementation.apply_xla_cpu(
        params, spec, tokens_BxT, precision, last_only
    )
  ln = spec.variant != "attn"
  z = embed(params, tokens_BxT)
  for layer in range(spec.num_layers):
    x = layer_norm(z) if ln else z
    if last_only and layer == spec.num_layers - 1:
      z, a = z[:, -1:], attention(params, spec, x, layer, precision, x[:, -1:])
    else:
      a = attention(params, spec, x, layer, precision)
    z = z + a if spec.residual else a
    if spec.variant == "res_ln_mlp":
      z = z + mlp(params, layer_norm(z), layer, precision)
  if ln:
    z = layer_norm(z)
  return jnp.einsum("btm,mc->btc", z, params["unembed"], precision=precision)
