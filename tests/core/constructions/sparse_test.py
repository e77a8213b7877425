"""ut.core.constructions.sparse: the structured forward and route_layer equal
the dense {0,1} formulation (values and gradients); the dense weights."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax.numpy as jnp
import numpy as np

from tests import model_reference
from ut.core.constructions import sparse


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
