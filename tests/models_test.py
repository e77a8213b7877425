"""Training models: shapes, labels, and equality with a plain numpy reference.

Shape glossary: B batch, T tokens, V vocabulary, C classes, M model width,
H heads, L layers, K head width, d sparse block width, m sparse UT width.

The numpy references below are written for these tests and share no code with
`ut` (the sparse kind's dense matrices come from `sparse.to_dense`, whose {0,1}
routing is itself checked against the structured path in simulate_test.py).
Every implementation (`models.IMPLS` but "auto") is checked against them, and
its gradients against autodiff of the same reference written with jax.numpy.
"""

import dataclasses
import functools
import itertools
import json
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import xla_settings
from ut.core.constructions import sparse
from ut.cpu import coefficients as cpu_coefficients
from ut.cpu import forward as cpu_forward
from ut.cpu import sparse_forms as cpu_sparse_forms
from ut.errors import UserError
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import records
from ut.training import step as step_lib

B, T = 3, 6
VOCAB, MAX_LEN, CLASSES = 5, 7, 3
# One model width M = 52 for every kind (sparse: m = 13 d at H = L = 2, d = 4),
# so that init's random draws share their compiled shapes across kinds.
SIZES = dict(
    num_heads=2, num_layers=2, width=4, m=52, head_width=8, mlp_ratio=2
)
SIZES_TRAINED = dict(SIZES, width=52)  # d for the trained kind.
COMBOS = [
    dict(testcase_name=f"{kind}_{variant}", kind=kind, variant=variant)
    for kind, variant in itertools.product(models.KINDS, models.VARIANTS)
]


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


def sparse_attn_spec(shape, **overrides):
  """The attention-only sparse kind at shape = (H, L, d, causal)."""
  h, num_layers, d, causal = shape
  return make_spec(
      "sparse",
      "attn",
      num_heads=h,
      num_layers=num_layers,
      width=d,
      causal=causal,
      **overrides,
  )


# apply is jitted once per spec (one compile instead of one per op and shape).
apply = jax.jit(models.apply, static_argnums=1)


def assert_impls_match_reference(spec, seed):
  """Every implementation's logits and gradients against the reference model,
  in float64: the logits against the numpy reference, the gradients against
  autodiff of the same reference written with jax.numpy."""
  params, tokens = make_inputs(spec, seed=seed)
  with jax.enable_x64(True):
    p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
    want = np_model(p64, spec, tokens)
    _, want_grads = logits_and_grads(reference_apply, p64, spec, tokens)
    for impl in ("reference", "xla_cpu"):
      got, grads = logits_and_grads(
          models.apply, p64, dataclasses.replace(spec, impl=impl), tokens
      )
      np.testing.assert_allclose(
          got, want, atol=F64_TOL, rtol=F64_TOL, err_msg=impl
      )
      for (path, g), w in zip(
          jax.tree_util.tree_leaves_with_path(grads),
          jax.tree.leaves(want_grads),
      ):
        np.testing.assert_allclose(
            g,
            w,
            atol=F64_TOL,
            rtol=F64_TOL,
            err_msg=f"{impl} {jax.tree_util.keystr(path)}",
        )


@functools.partial(jax.jit, static_argnums=(0, 2))
def logits_and_grads(apply_fn, params, spec, tokens):
  """apply_fn's logits and the gradient of sum(sin(logits)), jitted once."""
  logits, vjp = jax.vjp(lambda p: apply_fn(p, spec, tokens), params)
  return logits, vjp(jnp.cos(logits))[0]


def _last_rows(apply_fn, last_only):
  """apply_fn's logits, or their last row alone."""

  def rows(params, spec, tokens_BxT):
    logits = apply_fn(params, spec, tokens_BxT)
    return logits[:, -1:] if last_only else logits

  return rows


def _forced_order(paths, last_only):
  """models.apply with the sparse kind's order forced (traced under it)."""

  def forced(params, spec, tokens_BxT):
    with mock.patch.object(cpu_forward, "sparse_paths_form", lambda *_: paths):
      return models.apply(params, spec, tokens_BxT, last_only=last_only)

  return forced


# One function each, so that `logits_and_grads` compiles each once.
_FORCED_ORDER = {
    (paths, last_only): _forced_order(paths, last_only)
    for paths in (True, False)
    for last_only in (False, True)
}


def reference_apply(params, spec, tokens_BxT):
  """`np_example` in jax.numpy, vmapped over the batch (for autodiff)."""
  return jax.vmap(lambda tok: np_example(params, spec, tok, jnp))(tokens_BxT)


_REFERENCE_ROWS = {
    last_only: _last_rows(reference_apply, last_only)
    for last_only in (False, True)
}


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


def np_model(params, spec, tokens_BxT):
  """The model of models.py, one example and one layer at a time, in float64."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  return np.stack([np_example(p, spec, tok) for tok in np.asarray(tokens_BxT)])


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


# ---------------------------------------------------------------------- tests


class OptimizedCompileTest(parameterized.TestCase):
  """Both implementations against the reference as XLA compiles them by
  default; ModelsTest covers every shape with most optimizations off."""

  @parameterized.parameters("sparse", "random", "trained")
  def test_impls_match_reference(self, kind):
    assert_impls_match_reference(make_spec(kind, "res_ln_mlp"), seed=6)


class ModelsTest(chex.TestCase):
  """Compiled with most XLA optimizations off (tests/xla_settings.py): the
  values are the same computation, and compiling is most of the time here."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.enterClassContext(xla_settings.fast_compile())

  @parameterized.named_parameters(*COMBOS)
  def test_init_apply_shapes_and_finite(self, kind, variant):
    spec = make_spec(kind, variant)
    params, tokens = make_inputs(spec)
    logits = apply(params, spec, tokens)
    chex.assert_shape(logits, (B, T, CLASSES))
    chex.assert_tree_all_finite(logits)
    chex.assert_tree_all_finite(params)
    self.assertEqual(params["embed"]["token"].shape, (VOCAB, spec.model_width))
    self.assertEqual(
        params["embed"]["position"].shape, (MAX_LEN, spec.model_width)
    )
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
        want = (
            "train"
            if name.startswith("embed/") or name == "unembed"
            else "frozen"
        )
      self.assertEqual(label, want, name)
    names = {"/".join(str(k.key) for k in path) for path, _ in flat}
    self.assertContainsSubset(
        {"embed/token", "embed/position", "unembed"}, names
    )
    if (
        kind != "trained"
    ):  # A UT has frozen leaves exactly where it has weights.
      has_frozen = "frozen" in jax.tree.leaves(labels)
      self.assertEqual(has_frozen, kind == "random" or variant == "res_ln_mlp")

  @parameterized.named_parameters(
      dict(c, testcase_name=f"{c['testcase_name']}_{impl}", impl=impl)
      for c in COMBOS
      for impl in ("reference", "xla_cpu")
  )
  def test_apply_matches_numpy_reference(self, kind, variant, impl):
    spec = make_spec(kind, variant, impl=impl)
    params, tokens = make_inputs(make_spec(kind, variant))
    got = np.asarray(apply(params, spec, tokens))
    want = np_model(params, spec, tokens)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)

  @parameterized.product(
      shape=SPARSE_SHAPES,
      variant=models.VARIANTS,
  )
  def test_sparse_every_impl_and_gradient_matches_reference(
      self, shape, variant
  ):
    """Both sparse forwards (route_layer; per-level with folded LayerNorm) and
    their gradients against the dense {0,1} reference, beyond H = L = 2."""
    h, num_layers, d, causal = shape
    spec = make_spec(
        "sparse",
        variant,
        num_heads=h,
        num_layers=num_layers,
        width=d,
        causal=causal,
    )
    assert_impls_match_reference(spec, seed=1)

  @parameterized.product(
      shape=SPARSE_SHAPES,
      paths=(True, False),
      last_only=(False, True),
  )
  def test_sparse_attn_both_orders_match_reference(
      self, shape, paths, last_only
  ):
    """xla_cpu's attention-only sparse forward routed along head strings
    (`_apply_sparse_paths`) and by levels, whichever `sparse_paths_form`
    would pick here, against the reference's logits and gradients (float64;
    with last_only, the reference's last row)."""
    spec = sparse_attn_spec(shape)
    params, tokens = make_inputs(spec, seed=3)
    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
      want, want_grads = logits_and_grads(
          _REFERENCE_ROWS[last_only], p64, spec, tokens
      )
      got, grads = logits_and_grads(
          _FORCED_ORDER[paths, last_only],
          p64,
          dataclasses.replace(spec, impl="xla_cpu"),
          tokens,
      )
    self.assertEqual(got.shape[1], 1 if last_only else T)
    np.testing.assert_allclose(got, want, atol=F64_TOL, rtol=F64_TOL)
    for (path, g), w in zip(
        jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(want_grads)
    ):
      np.testing.assert_allclose(
          g, w, atol=F64_TOL, rtol=F64_TOL, err_msg=jax.tree_util.keystr(path)
      )

  @parameterized.product(shape=SPARSE_SHAPES, last_only=(False, True))
  def test_sparse_string_costs_count_the_forwards_matmuls(
      self, shape, last_only
  ):
    """`sparse_string_costs` against the multiply-adds of every matmul each
    order's forward traces, per added string (batch 2B less batch B), less
    what it leaves aside: the unembedding (Q d C) for both, and the levels'
    one-hot token embedding (T V m)."""
    spec = sparse_attn_spec(shape, impl="xla_cpu")
    params, tokens = make_inputs(spec, seed=3)

    def madds(paths, tokens):
      with mock.patch.object(
          cpu_forward, "sparse_paths_form", lambda *_: paths
      ):
        jaxpr = jax.make_jaxpr(
            lambda p: models.apply(p, spec, tokens, last_only=last_only)
        )(params)
      return dot_flops(jaxpr.jaxpr) // 2

    per_string = {
        paths: (madds(paths, jnp.tile(tokens, (2, 1))) - madds(paths, tokens))
        // B
        for paths in (True, False)
    }
    q = 1 if last_only else T
    unembed = q * spec.sparse_ut.width * CLASSES
    paths, levels = cpu_sparse_forms.sparse_string_costs(spec, T, last_only)
    self.assertEqual(per_string[True], paths + unembed)
    self.assertEqual(
        per_string[False], levels + unembed + T * VOCAB * spec.model_width
    )

  def test_sparse_paths_form_picks_by_multiply_adds(self):
    """On the protocols' configs: k-hop's attention-only sparse UT at k = 2
    and 3 routes along head strings (at most 1.2x the levels'
    multiply-adds), Dyck's (T = 61) and every other variant or kind the
    levels or their own forms."""
    cases = {
        (khop_config, "model=sparse,variant=attn,k=2"): True,
        (khop_config, "model=sparse,variant=attn,k=3"): True,
        (dyck_config, "model=sparse,variant=attn"): False,
        (khop_config, "model=sparse,variant=res_ln,k=2"): False,
        (khop_config, "model=random,variant=attn,k=2"): False,
    }
    for (module, arg), want in cases.items():
      config = module.get_config(arg)
      task = data_lib.make_task(config)
      spec = models.model_spec(config, task.info)
      n = data_lib.train_batch(config, task, 0)["tokens"].shape[1]
      paths, levels = (
          cpu_sparse_forms.sparse_string_costs(spec, n, spec.last_only)
          if spec.kind == "sparse"
          else (0, 0)
      )
      self.assertEqual(
          cpu_forward.sparse_paths_form(spec, n, spec.last_only),
          want,
          f"{arg}: paths {paths}, levels {levels} multiply-adds",
      )

  @parameterized.product(
      variant=models.VARIANTS,
      layers=[
          dict(shared=False, num_layers=1),
          dict(shared=False, num_layers=3),
          dict(shared=True, num_layers=3),
      ],
  )
  def test_random_every_impl_and_gradient_matches_reference(
      self, variant, layers
  ):
    """Both random-UT forwards and their gradients against the reference
    (xla_cpu: the first layer from its tables; attention-only, every case
    here has the coefficient form, `test_random_attn_coefficient_form`)."""
    assert_impls_match_reference(make_spec("random", variant, **layers), seed=4)

  @parameterized.parameters(*models.VARIANTS)
  def test_trained_every_impl_and_gradient_matches_reference(self, variant):
    assert_impls_match_reference(make_spec("trained", variant), seed=5)

  def test_auto_impl_follows_the_backend(self):
    want = "xla_cpu" if jax.default_backend() == "cpu" else "reference"
    self.assertEqual(implementation.resolve_impl("auto"), want)
    for impl in ("reference", "xla_cpu"):
      self.assertEqual(implementation.resolve_impl(impl), impl)
    with self.assertRaisesRegex(UserError, "impl='gpu'.*reference.*xla_cpu"):
      implementation.resolve_impl("gpu")

  def test_sparse_init_draws_in_the_old_block_order(self):
    """The sparse kind's E, U and MLP are the numbers init drew before the
    block order became (level, string, role): a seed keeps its model."""
    h, num_layers, d = 2, 2, 4
    spec = make_spec("sparse", "res_ln_mlp")
    params = models.init(jax.random.PRNGKey(7), spec)
    k_tok, _, k_u, _, _ = jax.random.split(jax.random.PRNGKey(7), 5)
    m = spec.model_width
    drawn_tok = np.asarray(jax.random.normal(k_tok, (VOCAB, m)))
    drawn_u = np.asarray(jax.random.normal(k_u, (m, CLASSES))) / np.sqrt(m)
    k1, _ = jax.random.split(jax.random.PRNGKey(spec.ut_seed + 1))
    drawn_w1 = np.asarray(
        jax.random.normal(k1, (num_layers, m, spec.mlp_hidden_width))
    ) / np.sqrt(m)

    def drawn_block(
        name,
    ):  # Level j: (s, every string), then (q h, every string).
      j = len(name[-1])
      level = sum((1 + h) * h**i for i in range(j))
      role = 0 if name[0] == "s" else 1 + name[1]
      string = int("".join(map(str, name[-1])) or "0", h)
      return level + role * h**j + string

    for i, name in enumerate(sparse.block_names(h, num_layers)):
      new, old = slice(i * d, (i + 1) * d), slice(
          drawn_block(name) * d, (drawn_block(name) + 1) * d
      )
      np.testing.assert_array_equal(
          params["embed"]["token"][:, new], drawn_tok[:, old], err_msg=str(name)
      )
      np.testing.assert_allclose(
          params["unembed"][new], drawn_u[old], rtol=1e-6, err_msg=str(name)
      )
      np.testing.assert_allclose(
          params["mlp"]["w1"][:, new],
          drawn_w1[:, old],
          rtol=1e-6,
          err_msg=str(name),
      )

  @parameterized.parameters("sparse", "random", "trained")
  def test_mlp_width_sets_hidden_width_and_matches_reference(self, kind):
    """mlp_width = F overrides mlp_ratio * M (the reference reads F off w1)."""
    spec = make_spec(kind, "res_ln_mlp", mlp_width=3)
    params, tokens = make_inputs(spec, seed=3)
    self.assertEqual(
        params["mlp"]["w1"].shape, (spec.num_layers, spec.model_width, 3)
    )
    np.testing.assert_allclose(
        np.asarray(apply(params, spec, tokens)),
        np_model(params, spec, tokens),
        atol=1e-4,
        rtol=1e-4,
    )

  def test_trained_attn_matches_plain_transformer(self):
    """The attention-only trained model written out with no helper at all."""
    spec = make_spec("trained", "attn", causal=True)
    params, tokens = make_inputs(spec, seed=2, t=MAX_LEN)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    w = p["layers"]
    want = []
    for tok in np.asarray(tokens):
      x = p["embed"]["token"][tok] + p["embed"]["position"][: len(tok)]
      n = len(tok)
      for l in range(spec.num_layers):
        new = np.zeros_like(x)
        for h in range(spec.num_heads):
          s = (
              (x @ w["wq"][l, h])
              @ (x @ w["wk"][l, h]).T
              / np.sqrt(spec.head_width)
          )
          s = np.where(np.tril(np.ones((n, n))) > 0, s, -np.inf)
          a = np.exp(s - s.max(-1, keepdims=True))
          a = a / a.sum(-1, keepdims=True)
          new += a @ x @ w["wv"][l, h] @ w["wo"][l, h]
        x = new
      want.append(x @ p["unembed"])
    got = apply(params, spec, tokens)
    np.testing.assert_allclose(
        np.asarray(got), np.stack(want), atol=1e-5, rtol=1e-4
    )

  @parameterized.product(
      kind=("sparse", "random", "trained"),
      impl=("reference", "xla_cpu"),
      last_only=(False, True),
  )
  def test_precision_reaches_every_matmul(self, kind, impl, last_only):
    # On TPU/GPU a dot without it would round to bfloat16/TF32.
    spec = make_spec(kind, "res_ln_mlp", impl=impl)
    params, tokens = make_inputs(make_spec(kind, "res_ln_mlp"))
    highest = jax.lax.Precision.HIGHEST
    jaxpr = jax.make_jaxpr(
        lambda p: models.apply(
            p, spec, tokens, precision=highest, last_only=last_only
        )
    )(params)

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
      want = (
          np.float32(0.1) * np.asarray(leaf) if path[0].key == "embed" else leaf
      )
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
      ("unknown_impl", dict(impl="gpu"), "impl='gpu'.*reference.*xla_cpu"),
  )
  def test_bad_spec_raises_user_error(self, overrides, name):
    kw = dict(kind="random", variant="attn")
    kw.update(overrides)
    kind, variant = kw.pop("kind"), kw.pop("variant")
    with self.assertRaisesRegex(UserError, name):
      make_spec(kind, variant, **kw)


# (num_layers, causal): one layer (the random UT's first layer, from its tables,
# is then the last), two, and three. The last row has no mask either way, so
# causal or not tells apart only the layers before the last.
LAST_ONLY_SHAPES = ((1, True), (2, False), (3, True))
LAST_ONLY_TOL = 1e-10


@functools.partial(jax.jit, static_argnums=1)
def last_row_loss_and_grads(params, spec, tokens_BxT):
  """For last_only False and True (one compile): the logits `models.apply`
  returns, and the gradient of the last row's cross-entropy (labels: each
  row's first token, mod C)."""

  def logits_and_grads(last_only):
    def loss(p):
      logits = models.apply(p, spec, tokens_BxT, last_only=last_only)
      labels_B = tokens_BxT[:, 0] % spec.num_classes
      logp_BxC = jax.nn.log_softmax(logits[:, -1])
      ce = -jnp.take_along_axis(logp_BxC, labels_B[:, None], -1).sum()
      return ce, logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return logits, grads

  return {last_only: logits_and_grads(last_only) for last_only in (0, 1)}


def ce_logits_and_grads(spec, tokens):
  """A jitted (params, apply, last_only) -> (logits, gradients) of a
  cross-entropy on the logits `apply(params, spec, tokens, last_only=...)`
  returns (labels: tokens % CLASSES); apply and last_only are static."""
  labels = tokens % CLASSES

  @functools.partial(jax.jit, static_argnums=(1, 2))
  def logits_and_grads(p, apply, last_only):
    def loss(p):
      logits = apply(p, spec, tokens, last_only=last_only)
      rows = labels[:, -logits.shape[1] :]
      logp = jax.nn.log_softmax(logits)
      ce = -jnp.take_along_axis(logp, rows[..., None], -1).sum()
      return ce, logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(p)
    return logits, grads

  return logits_and_grads


def assert_trainable_match(got, want, msg):
  """(logits, grads) against (logits, grads): the logits and the gradients
  of E and U within LAST_ONLY_TOL (relative to each gradient's largest)."""
  np.testing.assert_allclose(
      got[0], want[0], atol=LAST_ONLY_TOL, rtol=LAST_ONLY_TOL, err_msg=msg
  )
  for name, g, w in (
      ("token", got[1]["embed"]["token"], want[1]["embed"]["token"]),
      ("position", got[1]["embed"]["position"], want[1]["embed"]["position"]),
      ("unembed", got[1]["unembed"], want[1]["unembed"]),
  ):
    np.testing.assert_allclose(
        g,
        w,
        atol=LAST_ONLY_TOL * np.abs(w).max(),
        rtol=LAST_ONLY_TOL,
        err_msg=f"{msg} {name}",
    )


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


class LastOnlyTest(parameterized.TestCase):
  """apply(..., last_only=True) is apply(...)[:, -1:], gradients included."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.enterClassContext(xla_settings.fast_compile())

  @parameterized.named_parameters(*COMBOS)
  def test_last_only_matches_the_last_row_with_gradients(self, kind, variant):
    """Both implementations, float64, one to three layers, causal and not:
    the last row's logits and the gradients of its cross-entropy w.r.t. the
    trainable parameters."""
    for (num_layers, causal), impl in itertools.product(
        LAST_ONLY_SHAPES, ("reference", "xla_cpu")
    ):
      spec = make_spec(
          kind, variant, num_layers=num_layers, causal=causal, impl=impl
      )
      params, tokens = make_inputs(
          dataclasses.replace(spec, impl="auto"), seed=num_layers
      )
      msg = f"{impl} num_layers={num_layers} causal={causal}"
      with jax.enable_x64(True):
        p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
        out = last_row_loss_and_grads(p64, spec, tokens)
      (full, want_grads), (got, grads) = out[0], out[1]
      chex.assert_shape(full, (B, T, CLASSES))
      chex.assert_shape(got, (B, 1, CLASSES))
      # Not vacuous: another row's logits, or the last row without the
      # earlier positions' keys and values, would not pass.
      self.assertGreater(np.abs(full[:, -1] - full[:, -2]).max(), 1e-3, msg)
      self.assertGreater(
          np.abs(want_grads["embed"]["position"][0]).max(), 1e-6, msg
      )
      np.testing.assert_allclose(
          got, full[:, -1:], atol=LAST_ONLY_TOL, rtol=LAST_ONLY_TOL, err_msg=msg
      )
      labels = models.labels(params, spec)
      for (path, g), w, label in zip(
          jax.tree_util.tree_leaves_with_path(grads),
          jax.tree.leaves(want_grads),
          jax.tree.leaves(labels),
      ):
        if label == "train":
          scale = np.abs(w).max()
          np.testing.assert_allclose(
              g,
              w,
              atol=LAST_ONLY_TOL * scale,
              rtol=LAST_ONLY_TOL,
              err_msg=f"{msg} {jax.tree_util.keystr(path)}",
          )

  @parameterized.product(num_layers=(1, 2, 3), causal=(True, False))
  def test_random_attn_coefficient_form(self, num_layers, causal):
    """The attention-only random UT without an m-wide state
    (`ut.cpu.coefficients._random_attn_coefficients`, which xla_cpu's apply
    takes here), and the m-wide order it replaces (`apply_m_wide`), against
    the reference, float64: every row's logits and the last row's alone,
    and the gradients of a cross-entropy on them w.r.t. E and U."""
    self.check_coefficient_form(num_layers=num_layers, causal=causal)

  @parameterized.named_parameters(
      # 2^3 (T + V) = 88 <= m: four layers of one shared (looped) stack.
      ("four_looped_layers", dict(num_layers=4, shared=True, m=96)),
      ("three_heads", dict(num_heads=3, num_layers=2)),
      ("one_token", dict(num_layers=3, t=1)),
  )
  def test_random_attn_coefficient_form_other_shapes(self, overrides):
    self.check_coefficient_form(**overrides)

  def check_coefficient_form(self, t=T, **spec_overrides):
    spec = make_spec("random", "attn", impl="xla_cpu", **spec_overrides)
    self.assertTrue(cpu_forward.coefficient_form(spec, t))
    ref = dataclasses.replace(spec, impl="reference")
    params, tokens = make_inputs(ref, seed=5 + spec.num_layers, t=t)
    logits_and_grads = ce_logits_and_grads(spec, tokens)
    ref_apply = lambda p, s, x, last_only: models.apply(
        p, ref, x, last_only=last_only
    )
    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
      # The frozen maps one array per stack and head (what `step_lib.make_step`
      # passes the step), read by the same forward.
      split = implementation.split_frozen(p64, spec, t)
      self.assertTrue(cpu_forward.is_split(split["layers"]))
      for last_only in (False, True):
        want = logits_and_grads(p64, ref_apply, last_only)
        self.assertGreater(np.abs(want[1]["embed"]["position"]).max(), 1e-6)
        for name, apply, p in (
            ("stacked", models.apply, p64),
            ("m_wide", cpu_forward.apply_m_wide, p64),
            ("split", models.apply, split),
        ):
          assert_trainable_match(
              logits_and_grads(p, apply, last_only),
              want,
              f"{name} last_only={last_only}",
          )

  @parameterized.product(num_layers=(1, 2, 3), causal=(True, False))
  def test_random_residual_coefficient_form(self, num_layers, causal):
    """The random UT with res_ln in coefficient form
    (`ut.cpu.coefficients._random_residual_coefficients`, which xla_cpu's apply
    takes here) and the m-wide order against the reference, float64: every
    row's logits and the last row's alone, and the gradients of a
    cross-entropy on them w.r.t. E and U."""
    self.check_residual_form(num_layers=num_layers, causal=causal)

  @parameterized.named_parameters(
      ("three_looped_layers", dict(num_layers=3, shared=True)),
      ("three_heads", dict(num_heads=3, num_layers=2)),
      ("one_token", dict(num_layers=2, t=1)),
      # Narrower than its coefficient state (P = 11, 33, 99).
      ("narrow", dict(num_layers=3, m=20)),
  )
  def test_random_residual_coefficient_form_other_shapes(self, overrides):
    self.check_residual_form(**overrides)

  def check_residual_form(self, t=T, **spec_overrides):
    spec = make_spec("random", "res_ln", impl="xla_cpu", **spec_overrides)
    ref = dataclasses.replace(spec, impl="reference")
    params, tokens = make_inputs(ref, seed=7 + spec.num_layers, t=t)
    logits_and_grads = ce_logits_and_grads(spec, tokens)
    ref_apply = lambda p, s, x, last_only: models.apply(
        p, ref, x, last_only=last_only
    )

    def forced(form):  # models.apply with the form's rule forced: the rule
      # holds for wide UTs and large batches only.
      def apply(p, s, x, last_only):
        with mock.patch.object(
            cpu_forward, "residual_coefficient_form", lambda *_: form
        ):
          return models.apply(p, s, x, last_only=last_only)

      return apply

    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
      for last_only in (False, True):
        want = logits_and_grads(p64, ref_apply, last_only)
        self.assertGreater(np.abs(want[1]["embed"]["position"]).max(), 1e-6)
        for name, form in (("form", True), ("m_wide", False)):
          assert_trainable_match(
              logits_and_grads(p64, forced(form), last_only),
              want,
              f"{name} last_only={last_only}",
          )

  @parameterized.product(num_layers=(2, 3), last_only=(False, True))
  def test_residual_costs_count_the_forwards_matmuls(
      self, num_layers, last_only
  ):
    """`residual_costs` against the multiply-adds of every matmul each order
    traces, less what it leaves aside: the unembedding (B Q M C) and the
    final LayerNorm's row sums (2 B Q M) for both; in the m-wide order also
    the one-hot token embedding (B T V M) and each layer's LayerNorm row sums
    (2 B T M). P_l = (T + V) 3^l = 11 3^l here."""
    spec = make_spec("random", "res_ln", impl="xla_cpu", num_layers=num_layers)
    params, tokens = make_inputs(spec, seed=3)

    def madds(form, tokens=tokens):
      with mock.patch.object(
          cpu_forward, "residual_coefficient_form", lambda *_: form
      ):
        jaxpr = jax.make_jaxpr(
            lambda p: models.apply(p, spec, tokens, last_only=last_only)
        )(params)
      return dot_flops(jaxpr.jaxpr) // 2

    m, q = spec.model_width, 1 if last_only else T
    aside = B * q * m * CLASSES + 2 * B * q * m
    coefficient, rows, m_wide = cpu_coefficients.residual_costs(
        spec, B, T, last_only
    )
    self.assertEqual(madds(True), coefficient + aside)
    # The per-row part: what a second batch adds, less its last state.
    last_state = B * q * (1 + spec.num_heads) * 11 * 3 ** (num_layers - 1) * m
    self.assertEqual(
        madds(True, jnp.tile(tokens, (2, 1))) - madds(True),
        rows + last_state + aside,
    )
    self.assertEqual(
        madds(False),
        m_wide + aside + B * T * VOCAB * m + num_layers * 2 * B * T * m,
    )

  def test_residual_coefficient_form_picks_by_multiply_adds(self):
    """On k-hop's random UT with res_ln (batch 32, 32 tokens): the form at
    the benchmarked m = 928 and up at k = 2 and m = 400 and up at k = 1, not
    at m = 632 or the k-hop table's m = 256, nor with another variant or on
    the Dyck table (m = 256, 61 tokens, the loss on the last row: most of
    the form's work per row)."""
    cases = {
        ("model=random,variant=res_ln,k=2", 256): False,
        ("model=random,variant=res_ln,k=2", 632): False,
        ("model=random,variant=res_ln,k=2", 928): True,
        ("model=random,variant=res_ln,k=2", 1264): True,
        ("model=random,variant=res_ln,k=2", 2528): True,
        ("model=random,variant=res_ln,k=1", 400): True,
        ("model=random,variant=res_ln,k=1", 200): False,
        ("model=random,variant=res_ln_mlp,k=2", 2528): False,
        ("model=random,variant=attn,k=2", 2528): False,
    }
    for (arg, m), want in cases.items():
      config = khop_config.get_config(arg)
      config.model.m = m
      task = data_lib.make_task(config)
      spec = models.model_spec(config, task.info)
      b, t = data_lib.train_batch(config, task, 0)["tokens"].shape
      self.assertEqual((b, t), (32, 32))
      costs = cpu_coefficients.residual_costs(spec, b, t)
      self.assertEqual(
          cpu_forward.residual_coefficient_form(spec, b, t),
          want,
          f"{arg} m={m}: {costs} multiply-adds",
      )
      # The training step then takes the batch whole.
      if want:
        self.assertEqual(implementation.microbatches(b, t, spec), 1)
    config = dyck_config.get_config("model=random,variant=res_ln")
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    b, t = data_lib.train_batch(config, task, 0)["tokens"].shape
    self.assertFalse(
        cpu_forward.residual_coefficient_form(spec, b, t, spec.last_only)
    )

  def test_split_layers_hold_the_stacked_maps_and_serve_the_form_only(self):
    spec = make_spec("random", "attn", num_layers=2, impl="xla_cpu")
    params, tokens = make_inputs(spec, seed=3)
    split = implementation.split_frozen(params, spec, T)["layers"]
    for name in ("wq", "wk", "wv"):
      stacked = np.asarray(params["layers"][name])
      self.assertLen(split[name], stacked.shape[0])
      for l, stack in enumerate(split[name]):
        self.assertLen(stack, stacked.shape[1])
        for h, w in enumerate(stack):
          np.testing.assert_array_equal(w, stacked[l, h])
    # Where the model does not read split layers, params pass unchanged.
    for other in (
        dataclasses.replace(spec, impl="reference"),
        dataclasses.replace(spec, variant="res_ln"),
        make_spec("trained", "attn", impl="xla_cpu"),
    ):
      self.assertFalse(implementation.splits_layers(other, T))
      self.assertIs(implementation.split_frozen(params, other, T), params)
    m_wide = dataclasses.replace(spec, m=4)  # Below the form's rule.
    self.assertFalse(cpu_forward.coefficient_form(m_wide, T))
    with self.assertRaisesRegex(ValueError, "coefficient form only"):
      cpu_forward.apply(dict(params, layers=split), m_wide, tokens)

  def test_random_attn_coefficient_form_never_forms_an_m_wide_state(self):
    """At m = 256, large beside T and V, the two-layer UT's matmuls cost per
    added string less than forming layer 1's m-wide output from its
    P = H (T + V) coefficients (2 T P m), let alone the value product of the
    m-wide order (2 T m^2 H); and the rule that picks the form."""
    spec = make_spec("random", "attn", num_layers=2, m=256, impl="xla_cpu")
    params, tokens = make_inputs(spec, seed=5)

    def flops(tokens):
      return dot_flops(
          jax.make_jaxpr(
              lambda p: models.apply(p, spec, tokens, last_only=True)
          )(params).jaxpr
      )

    added = flops(jnp.tile(tokens, (2, 1))) - flops(tokens)
    self.assertLess(added, 2 * B * T * 2 * (T + VOCAB) * 256)
    self.assertTrue(cpu_forward.coefficient_form(spec, T))
    self.assertEqual(
        cpu_coefficients.coefficient_widths(spec, T),
        [T + VOCAB, 2 * (T + VOCAB)],
    )
    # The rule: at most half the M-wide order's multiply-adds per string,
    # counted by hand here for H = 2, K = 8, T = 6, P_l = 11 and 22.
    hand = 6 * 2 * sum(2 * p * 8 + 6 * 8 + 6 * p for p in (11, 22))
    for m, want in ((4, False), (16, False), (20, True), (52, True)):
      at_m = dataclasses.replace(spec, m=m)
      self.assertEqual(
          cpu_coefficients.string_costs(at_m, T),
          (hand, 2 * 6 * 2 * (2 * m * 8 + 6 * 8 + m * m + 6 * m)),
      )
      self.assertEqual(cpu_forward.coefficient_form(at_m, T), want, m)
    # Narrower than its widest coefficient state (22), and still the form.
    self.check_coefficient_form(m=20, num_layers=2)
    self.assertFalse(
        cpu_forward.coefficient_form(
            dataclasses.replace(spec, variant="res_ln"), T
        )
    )

  @parameterized.product(
      kind=models.KINDS, impl=("reference", "xla_cpu"), num_layers=(1, 2)
  )
  def test_last_only_skips_the_last_layers_other_rows(
      self, kind, impl, num_layers
  ):
    """The forward's matmuls with last_only do at most the full forward's
    minus what the last layer's queries, MLP and unembedding cost on the
    other T - 1 rows (not counted: attention and values, which vary)."""
    spec = make_spec(kind, "res_ln_mlp", num_layers=num_layers, impl=impl)
    params, tokens = make_inputs(dataclasses.replace(spec, impl="auto"))
    flops = {
        last_only: dot_flops(
            jax.make_jaxpr(
                lambda p, last_only=last_only: models.apply(
                    p, spec, tokens, last_only=last_only
                )
            )(params).jaxpr
        )
        for last_only in (False, True)
    }
    m, f = spec.model_width, spec.mlp_hidden_width
    per_row = 2 * m * (2 * f + CLASSES)  # MLP and unembedding.
    self.assertLessEqual(flops[True], flops[False] - B * (T - 1) * per_row)


class ImplConfigTest(parameterized.TestCase):

  def test_config_impl_reaches_the_spec_and_old_runs_read_as_auto(self):
    config = dyck_config.get_config("smoke")
    self.assertEqual(config.model.impl, "auto")
    config.model.impl = "reference"
    spec = models.model_spec(config, data_lib.make_task(config).info)
    self.assertEqual(spec.impl, "reference")
    recorded = json.loads(config.to_json_best_effort())
    del recorded["model"]["impl"]  # A run recorded before model.impl.
    self.assertEqual(records.stored_config(recorded)["model"]["impl"], "auto")


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
    want = np.stack(
        [
            np_attention(
                zb, dense["wq"][0], dense["wk"][0], dense["wv"][0], None, causal
            )
            for zb in z
        ]
    )
    route = self.variant(functools.partial(sparse.route_layer, causal=causal))
    got = route(ut, jnp.asarray(z, jnp.float32))
    chex.assert_shape(got, z.shape)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)
    for q in (1, 3):  # Only the last q rows' queries (keys: every row).
      got_q = route(
          ut, jnp.asarray(z, jnp.float32), z_query=jnp.asarray(z[:, -q:])
      )
      chex.assert_shape(got_q, (z.shape[0], q, ut.m))
      np.testing.assert_allclose(
          np.asarray(got_q), want[:, -q:], atol=1e-5, rtol=0
      )
    # Not vacuous: the layer moves mass between blocks (it is not the identity
    # or zero), so a wrong routing table would show.
    self.assertGreater(np.abs(want).max(), 0.1)
    self.assertGreater(np.abs(want - z).max(), 0.1)


if __name__ == "__main__":
  absltest.main()
