"""The training models' shared test inputs and a numpy reference.

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width,
H heads, L layers, K head width, d sparse block width, m sparse UT width.

The numpy references below are written for these tests and share no code with
`ut` (the sparse kind's dense matrices come from `sparse.to_dense`, whose {0,1}
routing is itself checked against the structured path in
tests/core/constructions/sparse_test.py). Every implementation (`models.IMPLS`
but "auto") is checked against them (tests/training/models_test.py,
tests/cpu/), and its gradients against autodiff of the same reference
written with jax.numpy.
"""

import functools

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from ut.core.constructions import sparse
from ut.training import models

B, T = 3, 6
VOCAB, MAX_LEN, CLASSES = 5, 7, 3
# One model width M = 52 for every kind (sparse: m = 13 d at H = L = 2, d = 4),
# so that init's random draws share their compiled shapes across kinds.
SIZES = dict(
    num_heads=2, num_layers=2, width=4, m=52, head_width=8, mlp_ratio=2
)
SIZES_TRAINED = dict(SIZES, width=52)  # d for the trained kind.


F64_TOL = 1e-9  # float64: both implementations compute the reference's values.


def make_spec(kind, variant, **overrides):
  sizes = SIZES_TRAINED if kind == "trained" else SIZES
  kw = dict(
      sizes, vocab_size=VOCAB, max_len=MAX_LEN, num_classes=CLASSES, causal=True
  )
  kw.update(overrides)
  return models.ModelSpec(kind=kind, variant=variant, **kw)


# (H, L, d, causal) of the sparse kind's equivalence tests, beyond H = L = 2.
SPARSE_SHAPES = (
    (1, 2, 3, True),
    (3, 2, 2, False),
    (2, 3, 2, True),
    (2, 1, 3, False),
)


@functools.partial(jax.jit, static_argnums=(0, 2))
def logits_and_grads(apply_fn, params, spec, tokens):
  """apply_fn's logits and the gradient of sum(sin(logits)), jitted once."""
  logits, vjp = jax.vjp(lambda p: apply_fn(p, spec, tokens), params)
  return logits, vjp(jnp.cos(logits))[0]


def reference_apply(params, spec, tokens_BxT):
  """`np_example` in jax.numpy, vmapped over the batch (for autodiff)."""
  return jax.vmap(lambda tok: np_example(params, spec, tok, jnp))(tokens_BxT)


@functools.lru_cache(maxsize=None)
def make_inputs(spec, seed=0, t=T):
  params = models.init(jax.random.PRNGKey(seed), spec)
  tokens = np.random.default_rng(seed).integers(0, spec.vocab_size, (B, t))
  return params, jnp.asarray(tokens, jnp.int32)


# ---------------------------------------------------------------- numpy reference


# Each takes xp = numpy, or jax.numpy for the gradients' reference (autodiff).


def np_softmax(s, xp=np):
  s = s - s.max(axis=-1, keepdims=True)
  e = xp.exp(s)
  return e / e.sum(axis=-1, keepdims=True)


def np_layer_norm(z, eps=1e-5, xp=np):
  mean = z.mean(axis=-1, keepdims=True)
  var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)
  return (z - mean) / xp.sqrt(var + eps)


def np_gelu(x, xp=np):  # The tanh approximation (jax.nn.gelu's default).
  return 0.5 * x * (1 + xp.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def np_attention(x_TxM, wq_HxMxK, wk_HxMxK, wv_HxMxV, wo_HxVxM, causal, xp=np):
  """sum_h softmax(mask(x wq_h (x wk_h)^T / sqrt(K))) x wv_h [wo_h], one example."""
  n = x_TxM.shape[0]
  out = 0.0
  for h in range(wq_HxMxK.shape[0]):
    scores = (x_TxM @ wq_HxMxK[h]) @ (x_TxM @ wk_HxMxK[h]).T
    scores = scores / np.sqrt(wq_HxMxK.shape[-1])
    if causal:
      scores = xp.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
    head = np_softmax(scores, xp) @ x_TxM @ wv_HxMxV[h]
    out = out + (head if wo_HxVxM is None else head @ wo_HxVxM[h])
  return out


def np_example(p, spec, tok_T, xp=np):
  """Logits (T, C) of one example."""
  if spec.kind == "sparse":  # The same {0,1} weights in every layer.
    dense = sparse.to_dense(spec.sparse_ut, np.float64)
    weights = lambda l: (dense["wq"][0], dense["wk"][0], dense["wv"][0], None)
  else:
    layers = p["layers"]
    lp = layers["wq"].shape[0]
    weights = lambda l: tuple(
        layers[k][l if lp > 1 else 0] if k in layers else None
        for k in ("wq", "wk", "wv", "wo")
    )
  ln = spec.variant != "attn"
  norm = lambda z: np_layer_norm(z, xp=xp) if ln else z
  z = p["embed"]["token"][tok_T] + p["embed"]["position"][: tok_T.shape[0]]
  for l in range(spec.num_layers):
    a = np_attention(norm(z), *weights(l), spec.causal, xp)
    z = z + a if ln else a
    if spec.variant == "res_ln_mlp":
      mlp = {k: v[l] for k, v in p["mlp"].items()}
      hidden = np_gelu(norm(z) @ mlp["w1"] + mlp["b1"][None], xp)
      z = z + hidden @ mlp["w2"] + mlp["b2"][None]
  return norm(z) @ p["unembed"]


LAST_ONLY_TOL = 1e-10


def dot_flops(jaxpr):
  """2 x multiply-adds of every dot_general in a jaxpr, nested ones included."""
  total = 0
  for e in jaxpr.eqns:
    if e.primitive.name == "dot_general":
      (lhs_contract, _), _ = e.params["dimension_numbers"]
      lhs = e.invars[0].aval.shape
      total += (
          2
          * np.prod(e.outvars[0].aval.shape)
          * np.prod([lhs[i] for i in lhs_contract])
      )
    for sub in jax.extend.core.jaxprs_in_params(e.params):
      total += dot_flops(sub)
  return total
