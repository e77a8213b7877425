"""ut.core.targets: the draws are jax.random.normal's, and apply matches the
numpy reference (tests/reference.py)."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from tests import reference
from tests import simulate_helpers
from ut.core import targets as targets_lib


class TargetDrawTest(parameterized.TestCase):

  @parameterized.product(
      shape=[(10, 2, 64, 64), (3, 1, 5, 7), (2, 3), (11,)],
      dtype=["float32", "float64"],
      partitionable=[True, False],
  )
  def test_flat_draw_is_jax_random_normal(self, shape, dtype, partitionable):
    key = jax.random.PRNGKey(3)
    with jax.enable_x64(True), jax.threefry_partitionable(partitionable):
      got = targets_lib.normal(key, shape, dtype)
      want = jax.random.normal(key, shape, dtype)
    self.assertEqual((got.shape, got.dtype), (want.shape, want.dtype))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

  def test_init_draws_as_jax_random_normal_over_sqrt_fan_in(self):
    key = jax.random.PRNGKey(4)
    target = targets_lib.init(
        key, num_heads=2, num_layers=3, width=4, head_width=5, out_width=6
    )
    kq, kk, kv, ko, ku = jax.random.split(key, 5)
    want = dict(
        wq=jax.random.normal(kq, (3, 2, 4, 5)) / np.float32(2),
        wk=jax.random.normal(kk, (3, 2, 4, 5)) / np.float32(2),
        wv=jax.random.normal(kv, (3, 2, 4, 4)) / np.float32(2),
        wo=jax.random.normal(ko, (3, 2, 4, 4)) / np.sqrt(8).astype(np.float32),
        wu=jax.random.normal(ku, (4, 6)) / np.float32(2),
    )
    for name, w in want.items():
      np.testing.assert_array_equal(getattr(target, name), w, err_msg=name)


class TargetApplyTest(parameterized.TestCase):

  @parameterized.parameters((True, False), (False, True))
  def test_target_apply_matches_reference(self, causal, residual):
    w, target = simulate_helpers.make_target(
        2,
        num_heads=2,
        num_layers=2,
        width=4,
        causal=causal,
        looped=False,
        residual=residual,
        out_width=3,
    )
    # Non-square heads: k != kv != d.
    rng = np.random.default_rng(4)
    w.update(
        wq=rng.standard_normal((2, 2, 4, 5)),
        wk=rng.standard_normal((2, 2, 4, 5)),
        wv=rng.standard_normal((2, 2, 4, 3)),
        wo=rng.standard_normal((2, 2, 3, 4)),
    )
    target = targets_lib.Target(**w, causal=causal, residual=residual)
    x = rng.standard_normal((3, 6, 4))
    with jax.enable_x64(True):
      y = np.asarray(targets_lib.apply(target, x))
    np.testing.assert_allclose(
        y,
        reference.target_forward(w, x, causal=causal, residual=residual),
        atol=1e-12,
        rtol=0,
    )


if __name__ == "__main__":
  absltest.main()
