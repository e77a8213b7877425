"""ut.core.constructions.sparse: the structured forward and route_layer equal
the dense {0,1} formulation (values and gradients); the dense weights."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from tests import model_reference
from ut.core import bounds
from ut.core import transformer
from ut.core.constructions import sparse


class StructuredPathTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(
      shape=((1, 3, 3, False), (2, 2, 2, True), (3, 2, 2, False)),
      order=sparse.ORDERS,
  )
  def test_structured_equals_dense(self, shape, order):
    h, num_layers, d, residual = shape
    ut = sparse.make_sparse_ut(h, num_layers, d)
    rng = np.random.default_rng(0)
    embed = rng.standard_normal((d, ut.m))  # Any E, not only compiled ones.
    x = rng.standard_normal((2, 4, d))
    dense = dict(sparse.to_dense(ut, np.float64), embed=embed)
    with jax.enable_x64(True):
      structured = self.variant(
          lambda e, x: sparse.sparse_apply(
              ut, e, x, causal=True, residual=residual, order=order
          )
      )(embed, x)
      want = transformer.forward(
          dense, x, num_layers=num_layers, causal=True, residual=residual
      )
    chex.assert_trees_all_close(structured, want, atol=1e-12, rtol=1e-12)

  @parameterized.product(
      shape=((1, 1, 3), (2, 4, 2), (3, 2, 2)),
      residual=(False, True),
      causal=(False, True),
      order=sparse.ORDERS,
  )
  def test_structured_gradient_equals_dense(
      self, shape, residual, causal, order
  ):
    # The gradient wrt E (what training and sparse_bench differentiate), with
    # a readout, against autodiff of the dense {0,1} formulation.
    h, num_layers, d = shape
    ut = sparse.make_sparse_ut(h, num_layers, d)
    rng = np.random.default_rng(1)
    embed = rng.standard_normal((d, ut.m))
    readout = rng.standard_normal((d, 3))
    x = rng.standard_normal((2, 5, d))
    dense = sparse.to_dense(ut, np.float64)

    def structured_loss(e):
      y = sparse.sparse_apply(
          ut,
          e,
          x,
          causal=causal,
          residual=residual,
          readout=readout,
          order=order,
      )
      return jnp.sum(jnp.sin(y))

    def dense_loss(e):
      y = transformer.forward(
          dict(dense, embed=e, readout=readout),
          x,
          num_layers=num_layers,
          causal=causal,
          residual=residual,
      )
      return jnp.sum(jnp.sin(y))

    with jax.enable_x64(True):
      got = jax.jit(jax.value_and_grad(structured_loss))(embed)
      want = jax.jit(jax.value_and_grad(dense_loss))(embed)
    chex.assert_trees_all_close(got, want, atol=1e-11, rtol=1e-11)

  @parameterized.parameters(False, True)
  def test_last_only_is_the_last_row_with_gradients(self, residual):
    # X wider than d (as the training model's one-hot tokens and positions).
    ut = sparse.make_sparse_ut(2, 3, 2)
    rng = np.random.default_rng(2)
    embed = rng.standard_normal((5, ut.m))
    x = rng.standard_normal((2, 6, 5))

    def loss(e, last_only):
      y = sparse.sparse_apply(
          ut, e, x, causal=True, residual=residual, last_only=last_only
      )
      if not last_only:
        y = y[:, -1:]
      return jnp.sum(jnp.sin(y)), y

    with jax.enable_x64(True):
      (_, got), got_grad = jax.value_and_grad(loss, has_aux=True)(embed, True)
      (_, want), want_grad = jax.value_and_grad(loss, has_aux=True)(
          embed, False
      )
    self.assertEqual(got.shape, (2, 1, 2))
    chex.assert_trees_all_close(
        (got, got_grad), (want, want_grad), atol=1e-12, rtol=1e-12
    )

  @parameterized.parameters(
      ("levels", 3, "order='levels' needs X of the block width d = 2, got 3"),
      ("dense", 2, "order='dense'; use one of .*paths.*levels"),
  )
  def test_bad_order_or_width_is_one_line_error(self, order, width, message):
    ut = sparse.make_sparse_ut(2, 2, 2)
    with self.assertRaisesRegex(ValueError, message):
      sparse.sparse_apply(
          ut,
          np.zeros((width, ut.m)),
          np.zeros((1, 3, width)),
          causal=True,
          residual=False,
          order=order,
      )

  def test_dense_weights_are_01_and_shared(self):
    ut = sparse.make_sparse_ut(2, 3, 2)
    dense = sparse.to_dense(ut)
    for name, w in dense.items():
      self.assertTrue(np.all((w == 0) | (w == 1)), name)
    self.assertEqual(
        dense["wv"].shape[0], 1
    )  # One set of weights, every layer.
    self.assertEqual(dense["wv"].shape[-1], bounds.sparse_width(2, 3, 2))
    # Each R_V[g] is a partial permutation of blocks: at most one 1 per row/column.
    for g in range(2):
      self.assertLessEqual(dense["wv"][0, g].sum(0).max(), 1)
      self.assertLessEqual(dense["wv"][0, g].sum(1).max(), 1)


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
            model_reference.np_attention(
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
