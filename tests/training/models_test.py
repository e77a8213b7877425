"""Training models: shapes, labels, and equality with a plain numpy reference.

The shape glossary, the shared inputs and the numpy reference are in
tests/model_reference.py; it shares no code with `ut`. Every implementation
(`models.IMPLS` but "auto") is checked against it, and its gradients against
autodiff of the same reference written with jax.numpy; the CPU forms each
implementation takes are tested in tests/cpu/.
"""

import dataclasses
import functools
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from configs import cpu as cpu_config
from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import model_reference
from tests import xla_settings
from ut.core.constructions import sparse
from ut.errors import UserError
from ut.training import data as data_lib
from ut.training import models

COMBOS = [
    dict(testcase_name=f"{kind}_{variant}", kind=kind, variant=variant)
    for kind, variant in itertools.product(models.KINDS, models.VARIANTS)
]


# apply is jitted once per spec (one compile instead of one per op and shape).
apply = jax.jit(models.apply, static_argnums=1)


def assert_impls_match_reference(spec, seed):
  """Every implementation's logits and gradients against the reference model,
  in float64: the logits against the numpy reference, the gradients against
  autodiff of the same reference written with jax.numpy."""
  params, tokens = model_reference.make_inputs(spec, seed=seed)
  with jax.enable_x64(True):
    p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
    want = np_model(p64, spec, tokens)
    _, want_grads = model_reference.logits_and_grads(
        model_reference.reference_apply, p64, spec, tokens
    )
    for impl in ("reference", "xla_cpu"):
      got, grads = model_reference.logits_and_grads(
          models.apply, p64, dataclasses.replace(spec, impl=impl), tokens
      )
      np.testing.assert_allclose(
          got,
          want,
          atol=model_reference.F64_TOL,
          rtol=model_reference.F64_TOL,
          err_msg=impl,
      )
      for (path, g), w in zip(
          jax.tree_util.tree_leaves_with_path(grads),
          jax.tree.leaves(want_grads),
      ):
        np.testing.assert_allclose(
            g,
            w,
            atol=model_reference.F64_TOL,
            rtol=model_reference.F64_TOL,
            err_msg=f"{impl} {jax.tree_util.keystr(path)}",
        )


def np_model(params, spec, tokens_BxT):
  """The model of models.py, one example and one layer at a time, in float64."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  return np.stack(
      [
          model_reference.np_example(p, spec, tok)
          for tok in np.asarray(tokens_BxT)
      ]
  )


# (num_layers, causal): one layer (the random UT's first layer, from its tables,
# is then the last), two, and three. The last row has no mask either way, so
# causal or not tells apart only the layers before the last.
LAST_ONLY_SHAPES = ((1, True), (2, False), (3, True))


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


# ---------------------------------------------------------------------- tests


class OptimizedCompileTest(parameterized.TestCase):
  """Both implementations against the reference as XLA compiles them by
  default; ModelsTest covers every shape with most optimizations off."""

  @parameterized.parameters("sparse", "random", "trained")
  def test_impls_match_reference(self, kind):
    assert_impls_match_reference(
        model_reference.make_spec(kind, "res_ln_mlp"), seed=6
    )


class ModelsTest(xla_settings.FastCompile, chex.TestCase):
  """Compiled with most XLA optimizations off (tests/xla_settings.py): the
  values are the same computation, and compiling is most of the time here."""

  @parameterized.named_parameters(*COMBOS)
  def test_init_apply_shapes_and_finite(self, kind, variant):
    spec = model_reference.make_spec(kind, variant)
    params, tokens = model_reference.make_inputs(spec)
    logits = apply(params, spec, tokens)
    chex.assert_shape(
        logits, (model_reference.B, model_reference.T, model_reference.CLASSES)
    )
    chex.assert_tree_all_finite(logits)
    chex.assert_tree_all_finite(params)
    self.assertEqual(
        params["embed"]["token"].shape,
        (model_reference.VOCAB, spec.model_width),
    )
    self.assertEqual(
        params["embed"]["position"].shape,
        (model_reference.MAX_LEN, spec.model_width),
    )
    self.assertEqual(
        params["unembed"].shape, (spec.model_width, model_reference.CLASSES)
    )
    self.assertEqual("mlp" in params, variant == "res_ln_mlp")
    self.assertEqual("layers" in params, kind != "sparse")

  @parameterized.named_parameters(*COMBOS)
  def test_labels_cover_every_leaf_once(self, kind, variant):
    spec = model_reference.make_spec(kind, variant)
    params, _ = model_reference.make_inputs(spec)
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
    spec = model_reference.make_spec(kind, variant, impl=impl)
    params, tokens = model_reference.make_inputs(
        model_reference.make_spec(kind, variant)
    )
    got = np.asarray(apply(params, spec, tokens))
    want = np_model(params, spec, tokens)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)

  @parameterized.product(
      shape=model_reference.SPARSE_SHAPES,
      variant=models.VARIANTS,
  )
  def test_sparse_every_impl_and_gradient_matches_reference(
      self, shape, variant
  ):
    """Both sparse forwards (route_layer; per-level with folded LayerNorm) and
    their gradients against the dense {0,1} reference, beyond H = L = 2."""
    h, num_layers, d, causal = shape
    spec = model_reference.make_spec(
        "sparse",
        variant,
        num_heads=h,
        num_layers=num_layers,
        width=d,
        causal=causal,
    )
    assert_impls_match_reference(spec, seed=1)

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
    assert_impls_match_reference(
        model_reference.make_spec("random", variant, **layers), seed=4
    )

  @parameterized.parameters(*models.VARIANTS)
  def test_trained_every_impl_and_gradient_matches_reference(self, variant):
    assert_impls_match_reference(
        model_reference.make_spec("trained", variant), seed=5
    )

  def test_sparse_init_draws_in_the_old_block_order(self):
    """The sparse kind's E, U and MLP are the numbers init drew before the
    block order became (level, string, role): a seed keeps its model."""
    h, num_layers, d = 2, 2, 4
    spec = model_reference.make_spec("sparse", "res_ln_mlp")
    params = models.init(jax.random.PRNGKey(7), spec)
    k_tok, _, k_u, _, _ = jax.random.split(jax.random.PRNGKey(7), 5)
    m = spec.model_width
    drawn_tok = np.asarray(jax.random.normal(k_tok, (model_reference.VOCAB, m)))
    drawn_u = np.asarray(
        jax.random.normal(k_u, (m, model_reference.CLASSES))
    ) / np.sqrt(m)
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
    spec = model_reference.make_spec(kind, "res_ln_mlp", mlp_width=3)
    params, tokens = model_reference.make_inputs(spec, seed=3)
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
    spec = model_reference.make_spec("trained", "attn", causal=True)
    params, tokens = model_reference.make_inputs(
        spec, seed=2, t=model_reference.MAX_LEN
    )
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
    spec = model_reference.make_spec(kind, "res_ln_mlp", impl=impl)
    params, tokens = model_reference.make_inputs(
        model_reference.make_spec(kind, "res_ln_mlp")
    )
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
    spec = model_reference.make_spec("trained", "attn")
    params, _ = model_reference.make_inputs(spec)
    with self.assertRaisesRegex(UserError, "position table"):
      models.apply(
          params, spec, jnp.zeros((1, model_reference.MAX_LEN + 1), jnp.int32)
      )

  @parameterized.parameters("sparse", "random", "trained")
  def test_embed_scale_scales_only_the_embedding(self, kind):
    key = jax.random.PRNGKey(3)
    base = models.init(key, model_reference.make_spec(kind, "res_ln_mlp"))
    scaled = models.init(
        key, model_reference.make_spec(kind, "res_ln_mlp", embed_scale=0.1)
    )
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
      model_reference.make_spec(kind, variant, **kw)


class LastOnlyTest(xla_settings.FastCompile, parameterized.TestCase):
  """apply(..., last_only=True) is apply(...)[:, -1:], gradients included."""

  @parameterized.named_parameters(*COMBOS)
  def test_last_only_matches_the_last_row_with_gradients(self, kind, variant):
    """Both implementations, float64, one to three layers, causal and not:
    the last row's logits and the gradients of its cross-entropy w.r.t. the
    trainable parameters."""
    for (num_layers, causal), impl in itertools.product(
        LAST_ONLY_SHAPES, ("reference", "xla_cpu")
    ):
      spec = model_reference.make_spec(
          kind, variant, num_layers=num_layers, causal=causal, impl=impl
      )
      params, tokens = model_reference.make_inputs(
          dataclasses.replace(spec, impl="auto"), seed=num_layers
      )
      msg = f"{impl} num_layers={num_layers} causal={causal}"
      with jax.enable_x64(True):
        p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
        out = last_row_loss_and_grads(p64, spec, tokens)
      (full, want_grads), (got, grads) = out[0], out[1]
      chex.assert_shape(
          full, (model_reference.B, model_reference.T, model_reference.CLASSES)
      )
      chex.assert_shape(got, (model_reference.B, 1, model_reference.CLASSES))
      # Not vacuous: another row's logits, or the last row without the
      # earlier positions' keys and values, would not pass.
      self.assertGreater(np.abs(full[:, -1] - full[:, -2]).max(), 1e-3, msg)
      self.assertGreater(
          np.abs(want_grads["embed"]["position"][0]).max(), 1e-6, msg
      )
      np.testing.assert_allclose(
          got,
          full[:, -1:],
          atol=model_reference.LAST_ONLY_TOL,
          rtol=model_reference.LAST_ONLY_TOL,
          err_msg=msg,
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
              atol=model_reference.LAST_ONLY_TOL * scale,
              rtol=model_reference.LAST_ONLY_TOL,
              err_msg=f"{msg} {jax.tree_util.keystr(path)}",
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
    spec = model_reference.make_spec(
        kind, "res_ln_mlp", num_layers=num_layers, impl=impl
    )
    params, tokens = model_reference.make_inputs(
        dataclasses.replace(spec, impl="auto")
    )
    flops = {
        last_only: model_reference.dot_flops(
            jax.make_jaxpr(
                lambda p, last_only=last_only: models.apply(
                    p, spec, tokens, last_only=last_only
                )
            )(params).jaxpr
        )
        for last_only in (False, True)
    }
    m, f = spec.model_width, spec.mlp_hidden_width
    per_row = 2 * m * (2 * f + model_reference.CLASSES)  # MLP and unembedding.
    self.assertLessEqual(
        flops[True],
        flops[False] - model_reference.B * (model_reference.T - 1) * per_row,
    )


class ImplConfigTest(parameterized.TestCase):

  def test_config_impl_reaches_the_spec(self):
    config = dyck_config.get_config("smoke")
    self.assertEqual(config.model.impl, "auto")
    config.model.impl = "reference"
    spec = models.model_spec(config, data_lib.make_task(config).info)
    self.assertEqual(spec.impl, "reference")


class CpuThreadsTest(parameterized.TestCase):
  """XLA CPU's thread pool: cpu.threads, launch.train's per-run rule, and the
  backend started with a smaller pool and the whole affinity mask after."""

  def test_one_thread_where_the_step_takes_one_string_at_a_time(self):
    # Zhong & Andreas's Dyck size splits its batch of 1000 into single
    # strings (ut.cpu.host.microbatches); k-hop's step takes its batch whole.
    za = dyck_config.get_config("model=random,variant=res_ln_mlp,max_len=60")
    za.model.update(m=16, num_heads=4, head_width=4, mlp_ratio=4)
    za.train.batch_size = 1000
    self.assertEqual(models.cpu_threads(za), 1)
    khop = khop_config.get_config("model=random,variant=res_ln,k=3")
    self.assertIsNone(models.cpu_threads(khop))
    # An explicit cpu.microbatches counts: whole-batch steps keep every core.
    cpu_config.overlay(za)
    za.cpu.microbatches = "1"
    self.assertIsNone(models.cpu_threads(za))


if __name__ == "__main__":
  absltest.main()
