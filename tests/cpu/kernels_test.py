"""The XLA-CPU kernels equal the textbook ops and numpy, gradients included.

Shape glossary: B batch, T tokens, W width, K head width, V value width,
H heads, C classes.

Values are compared in float64 with the numpy reference (tests/reference.py)
or numpy written here; the custom VJPs are checked against finite differences
(`jax.test_util.check_grads`) and against autodiff of `ut.core.transformer`.
"""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np

from tests import reference
from ut.core import transformer
from ut.cpu import kernels

F64_TOL = 1e-12


def np_attention_layer(x_BxTxW, wq, wk, wv, wo, causal):
  """sum_h softmax(mask(x wq_h (x wk_h)^T / sqrt(K))) x wv_h [wo_h] in numpy."""
  t = x_BxTxW.shape[1]
  out = 0.0
  for h in range(wq.shape[0]):
    s = (
        (x_BxTxW @ wq[h])
        @ (x_BxTxW @ wk[h]).swapaxes(1, 2)
        / np.sqrt(wq.shape[-1])
    )
    if causal:
      s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    head = (e / e.sum(-1, keepdims=True)) @ x_BxTxW @ wv[h]
    out = out + (head if wo is None else head @ wo[h])
  return out


def np_layer_norm(z, eps=1e-5):
  mean = z.mean(-1, keepdims=True)
  return (z - mean) / np.sqrt(z.var(-1, keepdims=True) + eps)


class KernelsTest(chex.TestCase):

  @parameterized.named_parameters(
      ("wo_causal", True, 3, True),  # A target: K != V != W.
      ("no_wo_value_is_width", False, 4, False),  # A UT: V = W (one matmul).
      ("no_wo_narrow_values", False, 3, True),  # V < W, summed over heads.
  )
  def test_attention_layer_matches_numpy_and_textbook_gradients(
      self, with_wo, v, causal
  ):
    rng = np.random.default_rng(0)
    h, w, k = 2, 4, 5
    wq, wk = rng.standard_normal((2, 1, h, w, k))
    wv = rng.standard_normal((1, h, w, v))
    wo = rng.standard_normal((1, h, v, w)) if with_wo else None
    x = rng.standard_normal((2, 6, w))
    with jax.enable_x64(True):
      args = (x, wq[0], wk[0], wv[0]) + ((wo[0],) if with_wo else ())
      got = kernels.attention_layer(*args, causal=causal)
      want = np_attention_layer(
          x, wq[0], wk[0], wv[0], wo[0] if with_wo else None, causal
      )
      np.testing.assert_allclose(got, want, atol=F64_TOL, rtol=F64_TOL)
      if with_wo:  # The tests' target reference too.
        np.testing.assert_allclose(
            got,
            reference.target_forward(
                dict(wq=wq, wk=wk, wv=wv, wo=wo),
                x,
                causal=causal,
                residual=False,
            ),
            atol=F64_TOL,
            rtol=F64_TOL,
        )
      np.testing.assert_allclose(
          got,
          transformer.attention_layer(*args, causal=causal),
          atol=F64_TOL,
          rtol=F64_TOL,
      )
      loss = lambda fn: lambda *a: jnp.sum(jnp.sin(fn(*a, causal=causal)))
      argnums = tuple(range(len(args)))
      got_grads = jax.grad(loss(kernels.attention_layer), argnums)(*args)
      want_grads = jax.grad(loss(transformer.attention_layer), argnums)(*args)
      chex.assert_trees_all_close(got_grads, want_grads, atol=1e-10, rtol=1e-10)

  @parameterized.product(
      with_wo=(True, False), num_queries=(1, 3, 6), causal=(True, False)
  )
  def test_attention_layer_on_the_last_rows_matches_every_row(
      self, with_wo, num_queries, causal
  ):
    """x_query, the last Q rows of x, gives those rows of the layer (the
    causal mask shifted to their positions), gradients included, in both the
    textbook op and the kernel."""
    rng = np.random.default_rng(3)
    h, t, w, k = 2, 6, 4, 5
    wq, wk = rng.standard_normal((2, h, w, k))
    wv = rng.standard_normal((h, w, 3 if with_wo else w))
    wo = rng.standard_normal((h, 3, w)) if with_wo else None
    x = rng.standard_normal((2, t, w))
    with jax.enable_x64(True):
      want = np_attention_layer(x, wq, wk, wv, wo, causal)[:, t - num_queries :]
      # Not vacuous: each row differs from the one before it.
      self.assertGreater(np.abs(np.diff(want, axis=1)).min(initial=1.0), 1e-6)
      for fn in (transformer.attention_layer, kernels.attention_layer):
        last = lambda x, *w: fn(
            x, *w, causal=causal, x_query=x[:, t - num_queries :]
        )
        full = lambda x, *w: fn(x, *w, causal=causal)[:, t - num_queries :]
        args = (x, wq, wk, wv) + ((wo,) if with_wo else ())
        np.testing.assert_allclose(
            last(*args), want, atol=F64_TOL, rtol=F64_TOL, err_msg=str(fn)
        )
        loss = lambda f: lambda *a: jnp.sum(jnp.sin(f(*a)))
        argnums = tuple(range(len(args)))
        chex.assert_trees_all_close(
            jax.grad(loss(last), argnums)(*args),
            jax.grad(loss(full), argnums)(*args),
            atol=1e-10,
            rtol=1e-10,
        )

  def test_custom_vjps_match_finite_differences(self):
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
      a, x = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
      check_grads(kernels.batched_matmul, (a, x), order=1, modes=("rev",))
      check_grads(
          lambda a, x, y: kernels.batched_matmul(a, [x, y]),
          (a, x, 2 * x),
          order=1,
          modes=("rev",),
      )
      check_grads(
          kernels.softmax,
          (rng.standard_normal((2, 3, 7)),),
          order=1,
          modes=("rev",),
      )
      z = rng.standard_normal((2, 3, 4))
      for c in (2, 9):  # Broadcast multiply-adds (C <= 8), and a matmul.
        check_grads(
            kernels.unembed,
            (z, rng.standard_normal((4, c))),
            order=1,
            modes=("rev",),
        )

  def test_softmax_and_unembed_match_numpy(self):
    rng = np.random.default_rng(2)
    with jax.enable_x64(True):
      s = rng.standard_normal((3, 5, 6))
      e = np.exp(s - s.max(-1, keepdims=True))
      np.testing.assert_allclose(
          kernels.softmax(s),
          e / e.sum(-1, keepdims=True),
          atol=F64_TOL,
          rtol=F64_TOL,
      )
      z, u = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3))
      np.testing.assert_allclose(
          kernels.unembed(z, u), z @ u, atol=F64_TOL, rtol=F64_TOL
      )

  def test_row_max_is_max_for_every_width(self):
    """`row_max` (halving; odd widths share a middle column) against numpy's
    max, with -inf, ties and the maximum in every column."""
    rng = np.random.default_rng(5)
    row_max = jax.jit(kernels.row_max)
    for width in range(1, 20):
      x = rng.standard_normal((2, width + 1, width)).astype(np.float32)
      x[0, :width] += 10 * np.eye(width)  # The maximum in each column once.
      x[1, 0] = -np.inf
      x[1, 1] = 3.0
      np.testing.assert_array_equal(
          np.asarray(row_max(x)), x.max(-1, keepdims=True)
      )

  def test_level_stats_match_numpy_at_highest_precision(self):
    rng = np.random.default_rng(0)
    levels = [
        jnp.asarray(rng.normal(size=(2, 3, f)) * 5 + 2, jnp.float32)
        for f in (4, 8, 16)
    ]
    mean, inv = kernels.level_stats(levels)
    z = np.concatenate([np.asarray(x, np.float64) for x in levels], -1)
    np.testing.assert_allclose(mean[..., 0], z.mean(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        inv[..., 0], 1 / np.sqrt(z.var(-1) + 1e-5), rtol=1e-5
    )
    # Its row sums are matmuls: a default-precision one would round z to
    # bfloat16 on TPU, where LayerNorm's reduce does not.
    jaxpr = jax.make_jaxpr(kernels.level_stats)(levels)
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    self.assertLen(dots, 2 * len(levels))
    for e in dots:
      self.assertEqual(e.params["precision"], (jax.lax.Precision.HIGHEST,) * 2)

  def test_layer_norm_normed_matmul_and_token_embed_match_numpy(self):
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
      levels = [rng.standard_normal((2, 3, f)) for f in (4, 6)]
      rows = [rng.standard_normal((f, 5)) for f in (4, 6)]
      z = np.concatenate(levels, -1)
      np.testing.assert_allclose(
          kernels.layer_norm(z), np_layer_norm(z), atol=F64_TOL, rtol=F64_TOL
      )
      got = kernels.normed_matmul(
          levels, rows, kernels.level_stats(levels), precision=None
      )
      np.testing.assert_allclose(
          got, np_layer_norm(z) @ np.concatenate(rows), atol=1e-10, rtol=1e-10
      )
      table = rng.standard_normal((5, 4))
      tokens = rng.integers(0, 5, (2, 3))
      np.testing.assert_array_equal(
          kernels.token_embed(tokens, table), table[tokens]
      )


if __name__ == "__main__":
  absltest.main()
