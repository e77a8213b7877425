"""Zhong & Andreas's GPT-2 (ut/training/gpt2.py): forward, layout, init, optimiser."""

import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from configs import dyck as dyck_config
from tests import reference
from tests import xla_settings
from ut.errors import UserError
from ut.training import checkpoint
from ut.training import data
from ut.training import models
from ut.training import optimizer
from ut.training import step as step_lib
from ut.training import train
from ut.training.tasks import dyck


def za_spec(kind="gpt2_random", **kw):
  """Their model at our Dyck task's sizes (configs/common.py)."""
  fields = dict(
      kind=kind,
      variant="res_ln_mlp",
      vocab_size=dyck.VOCAB_SIZE,
      max_len=61,
      num_classes=dyck.NUM_CLASSES,
      num_heads=4,
      num_layers=2,
      width=16,
      head_width=4,
      mlp_width=64,
      left_pad=dyck.PAD,
      last_only=True,
  )
  return models.ModelSpec(**dict(fields, **kw))


def jittered(params, seed=0):
  """params with every leaf moved by noise: LayerNorm scales and biases, and
  the zero biases, then take values a bug could not hide behind."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree.unflatten(
      tree,
      [
          a + 0.3 * jax.random.normal(k, a.shape, a.dtype)
          for a, k in zip(leaves, keys)
      ],
  )


def size(tree):
  return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(tree))


class ForwardTest(parameterized.TestCase):

  def test_matches_the_numpy_reference_on_unpadded_strings(self):
    spec = za_spec(left_pad=-1, max_len=12, num_classes=3, vocab_size=5)
    params = jittered(models.init(jax.random.PRNGKey(1), spec))
    tokens = np.random.default_rng(0).integers(0, 5, (3, 12))
    got = models.apply(
        params, spec, jnp.asarray(tokens), jax.lax.Precision.HIGHEST
    )
    for b in range(3):
      want = reference.gpt2_forward(params, tokens[b], num_heads=4)
      np.testing.assert_allclose(got[b], want, rtol=2e-5, atol=2e-5)

  def test_left_padded_rows_read_as_their_strings_from_position_zero(self):
    spec = za_spec()
    params = jittered(models.init(jax.random.PRNGKey(2), spec), seed=3)
    texts = ["(", "()", "(()))(", "(" * 30 + ")" * 30]
    tokens = dyck.encode(texts, max_len=60)
    highest = jax.lax.Precision.HIGHEST
    got = models.apply(
        params, spec, jnp.asarray(tokens), highest, last_only=True
    )
    full = models.apply(params, spec, jnp.asarray(tokens), highest)
    self.assertEqual(got.shape, (4, 1, 2))
    np.testing.assert_allclose(got, full[:, -1:], rtol=2e-5, atol=2e-5)
    for b, text in enumerate(texts):
      string = tokens[b][tokens[b] != dyck.PAD]  # The string and its '?'.
      self.assertLen(string, len(text) + 1)
      want = reference.gpt2_forward(params, string, num_heads=4)
      np.testing.assert_allclose(got[b, 0], want[-1], rtol=2e-5, atol=2e-5)
      # Every position of the string keeps its logits, moved back in place.
      np.testing.assert_allclose(
          full[b, -len(string) :], want, rtol=2e-5, atol=2e-5
      )

  def test_gradients_flow_to_the_trained_leaves_only(self):
    spec = za_spec()
    params = models.init(jax.random.PRNGKey(0), spec)
    task_batch = data.make_task(
        dyck_config.get_config("model=gpt2_random,smoke")
    )
    batch = task_batch.batch(16, seed=0)
    grads = jax.grad(lambda p: step_lib.loss_and_metrics(p, spec, batch)[0])(
        params
    )
    labels = models.labels(params, spec)
    for (path, g), label in zip(
        jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(labels)
    ):
      self.assertEqual(
          label == "train",
          jax.tree_util.keystr(path).startswith(("['embed']", "['unembed']")),
          path,
      )
      self.assertGreater(float(jnp.abs(g).max()), 0, path)


class LayoutTest(parameterized.TestCase):

  def test_their_parameter_counts(self):
    # Their model (DESIGN §7): vocabulary 4, 80 positions, a 4-token head:
    # 8,000 parameters, 1,408 of them trained in the random model.
    spec = za_spec(max_len=80, num_classes=4)
    params = models.init(jax.random.PRNGKey(0), spec)
    labels = models.labels(params, spec)
    trained = [
        a
        for a, l in zip(jax.tree.leaves(params), jax.tree.leaves(labels))
        if l == "train"
    ]
    self.assertEqual(size(params), 8000)
    self.assertEqual(size(trained), 1408)
    full = za_spec(kind="gpt2", max_len=80, num_classes=4)
    self.assertEqual(
        set(jax.tree.leaves(models.labels(params, full))), {"train"}
    )

  def assert_normal(self, a, std):
    """a's entries look N(0, std^2): mean and std within 4 standard errors."""
    n = a.size
    self.assertAlmostEqual(float(jnp.mean(a)), 0.0, delta=4 * std / np.sqrt(n))
    self.assertAlmostEqual(
        float(jnp.std(a)), std, delta=4 * std / np.sqrt(2 * n)
    )

  def test_gpt2_init(self):
    spec = za_spec(
        mlp_width=512, width=64, head_width=16, max_len=400
    )  # Large.
    params = models.init(jax.random.PRNGKey(0), spec)
    blocks = params["blocks"]
    for a in (
        params["embed"]["token"],
        params["embed"]["position"],
        params["unembed"],
        blocks["attn"]["qkv"]["kernel"],
        blocks["mlp"]["fc"]["kernel"],
    ):
      self.assert_normal(a, 0.02)
    for a in (
        blocks["attn"]["proj"]["kernel"],
        blocks["mlp"]["proj"]["kernel"],
    ):
      self.assert_normal(a, 0.02 / np.sqrt(2 * 2))  # GPT-2's 0.02/sqrt(2 L).
    for ln in (blocks["ln1"], blocks["ln2"], params["ln_f"]):
      np.testing.assert_array_equal(ln["scale"], 1.0)
      np.testing.assert_array_equal(ln["bias"], 0.0)
    for p in (
        blocks["attn"]["qkv"],
        blocks["attn"]["proj"],
        blocks["mlp"]["fc"],
    ):
      np.testing.assert_array_equal(p["bias"], 0.0)

  def test_the_random_machine_is_the_ut_seed_draw(self):
    a = models.init(jax.random.PRNGKey(0), za_spec(ut_seed=5))
    b = models.init(jax.random.PRNGKey(1), za_spec(ut_seed=5))
    c = models.init(jax.random.PRNGKey(0), za_spec(ut_seed=6))
    same = lambda x, y: all(
        np.array_equal(p, q)
        for p, q in zip(jax.tree.leaves(x), jax.tree.leaves(y))
    )
    self.assertTrue(same(a["blocks"], b["blocks"]))
    self.assertFalse(same(a["embed"], b["embed"]))
    self.assertFalse(same(a["blocks"], c["blocks"]))

  def test_decay_mask_spares_biases_and_layernorms(self):
    params = models.init(jax.random.PRNGKey(0), za_spec())
    mask = {
        jax.tree_util.keystr(path): m
        for path, m in jax.tree_util.tree_leaves_with_path(
            models.decay_mask(params)
        )
    }
    decayed = sorted(k for k, m in mask.items() if m)
    self.assertEqual(
        decayed,
        [
            "['blocks']['attn']['proj']['kernel']",
            "['blocks']['attn']['qkv']['kernel']",
            "['blocks']['mlp']['fc']['kernel']",
            "['blocks']['mlp']['proj']['kernel']",
            "['embed']['position']",
            "['embed']['token']",
            "['unembed']",
        ],
    )
    self.assertLen(mask, 17)

  @parameterized.parameters(
      dict(variant="attn", match="variant=res_ln_mlp"),
      dict(width=18, match="multiple of model.num_heads"),
      dict(head_width=8, match="use model.head_width=4 and"),
      dict(embed_scale=0.1, match="model.embed_scale=1.0, not 4 and 0.1"),
  )
  def test_bad_specs(self, match, **kw):
    with self.assertRaisesRegex(UserError, match):
      za_spec(**kw)


class OptimiserTest(absltest.TestCase):

  def test_their_adamw_two_steps_by_hand(self):
    """Two AdamW steps with b2 = 0.999 and decay on the weights only,
    against the update rule written out (optax's own adamw not used)."""
    config = dyck_config.get_config("model=gpt2_random,optimizer=za")
    config.train.warmup_steps = 0  # The peak lr from the first step.
    config.train.grad_clip = 1e6  # No clipping: the rule alone.
    spec = za_spec(kind="gpt2")
    params = models.init(jax.random.PRNGKey(0), spec)
    tx, schedule = optimizer.make_optimizer(config, params, spec)
    state = tx.init(params)
    rng = np.random.default_rng(0)
    grads = [
        jax.tree.map(
            lambda a: jnp.asarray(rng.normal(size=a.shape), a.dtype), params
        )
        for _ in range(2)
    ]
    mask = models.decay_mask(params)
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 1e-3
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    m = jax.tree.map(np.zeros_like, p)
    v = jax.tree.map(np.zeros_like, p)
    got = params
    for t, g in enumerate(grads, start=1):
      updates, state = tx.update(g, state, got)
      got = optax.apply_updates(got, updates)
      lr = float(schedule(t - 1))
      g64 = jax.tree.map(lambda a: np.asarray(a, np.float64), g)
      m = jax.tree.map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g64)
      v = jax.tree.map(lambda v_, g_: b2 * v_ + (1 - b2) * g_**2, v, g64)
      p = jax.tree.map(
          lambda p_, m_, v_, decay: p_
          - lr
          * (
              m_ / (1 - b1**t) / (np.sqrt(v_ / (1 - b2**t)) + eps)
              + (wd * p_ if decay else 0.0)
          ),
          p,
          m,
          v,
          mask,
      )
    self.assertEqual(config.train.lr, 1e-3)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(p)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)

  def test_bad_decay_on(self):
    config = dyck_config.get_config("model=gpt2_random,optimizer=za")
    config.train.decay_on = "biases"
    spec = za_spec()
    params = models.init(jax.random.PRNGKey(0), spec)
    with self.assertRaisesRegex(UserError, r"decay_on='biases'; use one of"):
      optimizer.make_optimizer(config, params, spec)


class TrainTest(xla_settings.FastCompile, absltest.TestCase):

  def test_smoke_run_trains_e_and_u_only(self):
    config = dyck_config.get_config("model=gpt2_random,optimizer=za,smoke")
    workdir = self.create_tempdir().full_path
    final = train.train_and_evaluate(config, workdir)
    self.assertEqual(final["kind"], "gpt2_random")
    self.assertEqual(final["trainable_params"], 4 * 16 + 9 * 16 + 16 * 2)
    params, spec, _, _, _ = checkpoint.restore_params(workdir)
    before = models.init(jax.random.PRNGKey(config.seed), spec)
    labels = models.labels(params, spec)
    for a, b, label in zip(
        jax.tree.leaves(params),
        jax.tree.leaves(before),
        jax.tree.leaves(labels),
    ):
      self.assertEqual(np.array_equal(a, b), label == "frozen")
    self.assertTrue(os.path.exists(os.path.join(workdir, "metrics.json")))


if __name__ == "__main__":
  absltest.main()
