"""Training models: shapes, labels, and equality with a plain numpy reference.

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width,
H heads, L layers, K head width, d sparse block width, m sparse UT width.

The numpy references below are written for these tests and share no code with
`ut` (the sparse kind's dense matrices come from `sparse.to_dense`, whose {0,1}
routing is itself checked against the structured path in simulate_test.py).
"""

import functools
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from ut.training import models
from ut.core.constructions import sparse
from ut.errors import UserError

B, T = 3, 6
VOCAB, MAX_LEN, CLASSES = 5, 7, 3
# One model width M = 52 for every kind (sparse: m = 13 d at H = L = 2, d = 4),
# so that init's random draws share their compiled shapes across kinds.
SIZES = dict(num_heads=2, num_layers=2, width=4, m=52, head_width=8,
             mlp_ratio=2)
SIZES_TRAINED = dict(SIZES, width=52)  # d for the trained kind.
COMBOS = [dict(testcase_name=f"{kind}_{variant}", kind=kind, variant=variant)
          for kind, variant in itertools.product(models.KINDS, models.VARIANTS)]


def make_spec(kind, variant, **overrides):
  sizes = SIZES_TRAINED if kind == "trained" else SIZES
  kw = dict(sizes, vocab_size=VOCAB, max_len=MAX_LEN, num_classes=CLASSES,
            causal=True)
  kw.update(overrides)
  return models.ModelSpec(kind=kind, variant=variant, **kw)


# apply is jitted once per spec (one compile instead of one per op and shape).
apply = jax.jit(models.apply, static_argnums=1)


def assert_matches_reference_and_plain_grads(spec, seed):
  """apply against the numpy reference, and the gradients of its structured
  path (sparse levels, random first layer) against structured=False."""
  params, tokens = make_inputs(spec, seed=seed)
  np.testing.assert_allclose(np.asarray(apply(params, spec, tokens)),
                             np_model(params, spec, tokens), atol=1e-4, rtol=1e-4)
  loss = lambda p, structured: jnp.sum(jnp.sin(models.apply(
      p, spec, tokens, structured=structured)))
  grads = [jax.jit(jax.grad(loss), static_argnums=1)(params, s)
           for s in (True, False)]
  chex.assert_trees_all_close(*grads, atol=1e-4, rtol=1e-4)


@functools.lru_cache(maxsize=None)
def make_inputs(spec, seed=0, t=T):
  params = models.init(jax.random.PRNGKey(seed), spec)
  tokens = np.random.default_rng(seed).integers(0, spec.vocab_size, (B, t))
  return params, jnp.asarray(tokens, jnp.int32)


# ---------------------------------------------------------------- numpy reference


def np_softmax(s):
  s = s - s.max(axis=-1, keepdims=True)
  e = np.exp(s)
  return e / e.sum(axis=-1, keepdims=True)


def np_layer_norm(z, eps=1e-5):
  mean = z.mean(axis=-1, keepdims=True)
  var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)
  return (z - mean) / np.sqrt(var + eps)


def np_gelu(x):  # The tanh approximation (jax.nn.gelu's default).
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def np_attention(x_TxM, wq_HxMxK, wk_HxMxK, wv_HxMxV, wo_HxVxM, causal):
  """sum_h softmax(mask(x wq_h (x wk_h)^T / sqrt(K))) x wv_h [wo_h], one example."""
  n = x_TxM.shape[0]
  out = 0.0
  for h in range(wq_HxMxK.shape[0]):
    scores = (x_TxM @ wq_HxMxK[h]) @ (x_TxM @ wk_HxMxK[h]).T
    scores = scores / np.sqrt(wq_HxMxK.shape[-1])
    if causal:
      scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
    head = np_softmax(scores) @ x_TxM @ wv_HxMxV[h]
    out = out + (head if wo_HxVxM is None else head @ wo_HxVxM[h])
  return out


def np_model(params, spec, tokens_BxT):
  """The model of models.py, one example and one layer at a time, in float64."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  if spec.kind == "sparse":  # The same {0,1} weights in every layer.
    dense = sparse.to_dense(spec.sparse_ut, np.float64)
    weights = lambda l: (dense["wq"][0], dense["wk"][0], dense["wv"][0], None)
  else:
    layers = p["layers"]
    lp = layers["wq"].shape[0]
    weights = lambda l: tuple(
        layers[k][l if lp > 1 else 0] if k in layers else None
        for k in ("wq", "wk", "wv", "wo"))
  ln = spec.variant != "attn"
  outs = []
  for tok in np.asarray(tokens_BxT):
    z = p["embed"]["token"][tok] + p["embed"]["position"][:len(tok)]
    for l in range(spec.num_layers):
      a = np_attention(np_layer_norm(z) if ln else z, *weights(l), spec.causal)
      z = z + a if ln else a
      if spec.variant == "res_ln_mlp":
        mlp = {k: v[l] for k, v in p["mlp"].items()}
        hidden = np_gelu(np_layer_norm(z) @ mlp["w1"] + mlp["b1"])
        z = z + hidden @ mlp["w2"] + mlp["b2"]
    outs.append((np_layer_norm(z) if ln else z) @ p["unembed"])
  return np.stack(outs)


# ---------------------------------------------------------------------- tests


class ModelsTest(chex.TestCase):

  @parameterized.named_parameters(*COMBOS)
  def test_init_apply_shapes_and_finite(self, kind, variant):
    spec = make_spec(kind, variant)
    params, tokens = make_inputs(spec)
    logits = apply(params, spec, tokens)
    chex.assert_shape(logits, (B, T, CLASSES))
    chex.assert_tree_all_finite(logits)
    chex.assert_tree_all_finite(params)
    self.assertEqual(params["embed"]["token"].shape, (VOCAB, spec.model_width))
    self.assertEqual(params["embed"]["position"].shape, (MAX_LEN, spec.model_width))
    self.assertEqual(params["unembed"].shape, (spec.model_width, CLASSES))
    self.assertEqual("mlp" in params, variant == "res_ln_mlp")
    self.assertEqual("layers" in params, kind != "sparse")

  @parameterized.named_parameters(*COMBOS)
  def test_labels_cover_every_leaf_once(self, kind, variant):
    spec = make_spec(kind, variant)
    params, _ = make_inputs(spec)
    labels = models.labels(params, spec)
    # Same tree: every parameter leaf has exactly one label, and nothing more.
    self.assertEqual(jax.tree.structure(labels), jax.tree.structure(params))
    flat, _ = jax.tree_util.tree_flatten_with_path(labels)
    self.assertLen(flat, len(jax.tree.leaves(params)))
    for path, label in flat:
      name = "/".join(str(k.key) for k in path)
      self.assertIn(label, ("train", "frozen"), name)
      if kind == "trained":
        want = "train"
      else:
        want = "train" if name.startswith("embed/") or name == "unembed" else "frozen"
      self.assertEqual(label, want, name)
    names = {"/".join(str(k.key) for k in path) for path, _ in flat}
    self.assertContainsSubset({"embed/token", "embed/position", "unembed"}, names)
    if kind != "trained":  # A UT has frozen leaves exactly where it has weights.
      has_frozen = "frozen" in jax.tree.leaves(labels)
      self.assertEqual(has_frozen, kind == "random" or variant == "res_ln_mlp")

  @parameterized.named_parameters(*COMBOS)
  def test_apply_matches_numpy_reference(self, kind, variant):
    spec = make_spec(kind, variant)
    params, tokens = make_inputs(spec)
    got = np.asarray(apply(params, spec, tokens))
    want = np_model(params, spec, tokens)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)

  @parameterized.product(
      shape=[(1, 2, 3), (3, 2, 2), (2, 3, 2), (2, 1, 3)],
      variant=models.VARIANTS, causal=[True, False])
  def test_sparse_other_shapes_match_reference_and_flat_grads(self, shape, variant,
                                                              causal):
    """The string-major structured path against the numpy reference, and its
    gradients against the flat (route_layer) path, beyond H = L = 2."""
    h, num_layers, d = shape
    spec = make_spec("sparse", variant, num_heads=h, num_layers=num_layers,
                     width=d, causal=causal)
    assert_matches_reference_and_plain_grads(spec, seed=1)

  @parameterized.product(variant=models.VARIANTS, shared=[False, True],
                         num_layers=[1, 3])
  def test_random_first_layer_matches_reference_and_plain_grads(
      self, variant, shared, num_layers):
    """The random UT's first layer from its tables (`_random_first_layer`)
    against the numpy reference, and its gradients against the plain layer."""
    spec = make_spec("random", variant, shared=shared, num_layers=num_layers)
    assert_matches_reference_and_plain_grads(spec, seed=4)

  @parameterized.parameters("sparse", "random", "trained")
  def test_mlp_width_sets_hidden_width_and_matches_reference(self, kind):
    """mlp_width = F overrides mlp_ratio * M (the reference reads F off w1)."""
    spec = make_spec(kind, "res_ln_mlp", mlp_width=3)
    params, tokens = make_inputs(spec, seed=3)
    self.assertEqual(params["mlp"]["w1"].shape,
                     (spec.num_layers, spec.model_width, 3))
    np.testing.assert_allclose(np.asarray(apply(params, spec, tokens)),
                               np_model(params, spec, tokens), atol=1e-4, rtol=1e-4)

  def test_trained_attn_matches_plain_transformer(self):
    """The attention-only trained model written out with no helper at all."""
    spec = make_spec("trained", "attn", causal=True)
    params, tokens = make_inputs(spec, seed=2, t=MAX_LEN)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    w = p["layers"]
    want = []
    for tok in np.asarray(tokens):
      x = p["embed"]["token"][tok] + p["embed"]["position"][:len(tok)]
      n = len(tok)
      for l in range(spec.num_layers):
        new = np.zeros_like(x)
        for h in range(spec.num_heads):
          s = (x @ w["wq"][l, h]) @ (x @ w["wk"][l, h]).T / np.sqrt(spec.head_width)
          s = np.where(np.tril(np.ones((n, n))) > 0, s, -np.inf)
          a = np.exp(s - s.max(-1, keepdims=True))
          a = a / a.sum(-1, keepdims=True)
          new += a @ x @ w["wv"][l, h] @ w["wo"][l, h]
        x = new
      want.append(x @ p["unembed"])
    got = apply(params, spec, tokens)
    np.testing.assert_allclose(np.asarray(got), np.stack(want), atol=1e-5, rtol=1e-4)

  def test_level_stats_match_numpy_at_highest_precision(self):
    rng = np.random.default_rng(0)
    levels = [jnp.asarray(rng.normal(size=(2, 3, f)) * 5 + 2, jnp.float32)
              for f in (4, 8, 16)]
    mean, inv = models._level_stats(levels)  # pylint: disable=protected-access
    z = np.concatenate([np.asarray(x, np.float64) for x in levels], -1)
    np.testing.assert_allclose(mean[..., 0], z.mean(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inv[..., 0], 1 / np.sqrt(z.var(-1) + 1e-5),
                               rtol=1e-5)
    # Its row sums are matmuls: a default-precision one would round z to
    # bfloat16 on TPU, where LayerNorm's reduce does not.
    jaxpr = jax.make_jaxpr(models._level_stats)(levels)  # pylint: disable=protected-access
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    self.assertLen(dots, 2 * len(levels))
    for e in dots:
      self.assertEqual(e.params["precision"], (jax.lax.Precision.HIGHEST,) * 2)

  @parameterized.product(kind=("sparse", "random", "trained"),
                         structured=(True, False))
  def test_precision_reaches_every_matmul(self, kind, structured):
    # On TPU/GPU a dot without it would round to bfloat16/TF32.
    spec = make_spec(kind, "res_ln_mlp")
    params, tokens = make_inputs(spec)
    highest = jax.lax.Precision.HIGHEST
    jaxpr = jax.make_jaxpr(lambda p: models.apply(
        p, spec, tokens, precision=highest, structured=structured))(params)

    def dots(jaxpr):
      for e in jaxpr.eqns:
        if e.primitive.name == "dot_general":
          yield e
        for sub in jax.extend.core.jaxprs_in_params(e.params):
          yield from dots(sub)

    found = list(dots(jaxpr.jaxpr))
    self.assertGreater(len(found), 4)
    for e in found:
      self.assertEqual(e.params["precision"], (highest, highest), str(e))

  def test_sequence_longer_than_position_table_raises(self):
    spec = make_spec("trained", "attn")
    params, _ = make_inputs(spec)
    with self.assertRaisesRegex(UserError, "position table"):
      models.apply(params, spec, jnp.zeros((1, MAX_LEN + 1), jnp.int32))

  @parameterized.parameters("sparse", "random", "trained")
  def test_embed_scale_scales_only_the_embedding(self, kind):
    key = jax.random.PRNGKey(3)
    base = models.init(key, make_spec(kind, "res_ln_mlp"))
    scaled = models.init(key, make_spec(kind, "res_ln_mlp", embed_scale=0.1))
    for path, leaf in jax.tree_util.tree_leaves_with_path(base):
      got = scaled
      for p in path:
        got = got[p.key]
      want = np.float32(0.1) * np.asarray(leaf) if path[0].key == "embed" else leaf
      np.testing.assert_array_equal(got, want, err_msg=str(path))

  @parameterized.named_parameters(
      ("unknown_kind", dict(kind="dense"), "kind"),
      ("unknown_variant", dict(variant="mlp_only"), "variant"),
      ("zero_width", dict(width=0), "width"),
      ("negative_m", dict(m=-3), "m="),
      ("zero_layers", dict(num_layers=0), "num_layers"),
      ("bool_heads", dict(num_heads=True), "num_heads"),
      ("float_vocab", dict(vocab_size=2.5), "vocab_size"),
      ("zero_max_len", dict(max_len=0), "max_len"),
      ("negative_mlp_width", dict(mlp_width=-1), "mlp_width"),
      ("zero_embed_scale", dict(embed_scale=0.0), "embed_scale"),
      ("nan_embed_scale", dict(embed_scale=float("nan")), "embed_scale"),
      ("text_embed_scale", dict(embed_scale="0.1"), "embed_scale"),
  )
  def test_bad_spec_raises_user_error(self, overrides, name):
    kw = dict(kind="random", variant="attn")
    kw.update(overrides)
    kind, variant = kw.pop("kind"), kw.pop("variant")
    with self.assertRaisesRegex(UserError, name):
      make_spec(kind, variant, **kw)


class SparseRouteLayerTest(chex.TestCase):
  """route_layer (block reshapes) equals the dense {0,1} formulation."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("H1_L1_d3", 1, 1, 3, True),
      ("H2_L2_d3", 2, 2, 3, True),
      ("H2_L2_d3_bidir", 2, 2, 3, False),
      ("H3_L2_d2", 3, 2, 2, True),
      ("H2_L3_d2_bidir", 2, 3, 2, False),
  )
  def test_matches_dense(self, num_heads, num_layers, d, causal):
    ut = sparse.make_sparse_ut(num_heads, num_layers, d)
    dense = sparse.to_dense(ut, np.float64)
    rng = np.random.default_rng(num_heads * 100 + num_layers * 10 + d)
    z = rng.standard_normal((2, 5, ut.m))
    want = np.stack([
        np_attention(zb, dense["wq"][0], dense["wk"][0], dense["wv"][0], None,
                     causal) for zb in z])
    route = self.variant(functools.partial(sparse.route_layer, causal=causal))
    got = route(ut, jnp.asarray(z, jnp.float32))
    chex.assert_shape(got, z.shape)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)
    # Not vacuous: the layer moves mass between blocks (it is not the identity
    # or zero), so a wrong routing table would show.
    self.assertGreater(np.abs(want).max(), 0.1)
    self.assertGreater(np.abs(want - z).max(), 0.1)


if __name__ == "__main__":
  absltest.main()
