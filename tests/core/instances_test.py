"""ut.core.instances: random targets are `targets.init`'s draws, compiled once."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from tests import simulate_helpers
from ut.core import instances
from ut.core import targets as targets_lib


class PaddingTest(parameterized.TestCase):
  """Classes that fit one `Padding` share their compiled programs."""

  def test_random_targets_are_init_s_and_compile_once(self):
    jax.clear_caches()
    # (2, 4, 7): 392 weights each, more than one draw of _MIN_DRAW holds.
    classes = [(1, 1, 4), (3, 2, 2), (2, 4, 7)]
    for i, (h, num_layers, d) in enumerate(classes):
      with simulate_helpers.count_compiles() as compiles:
        got = instances.random_targets(
            h, num_layers, d, num=2, seed=5, causal=False
        )
      if 0 < i < len(classes) - 1:
        self.assertEqual(compiles[0], 0, (h, num_layers, d))
      key = jax.random.PRNGKey(5)
      for j, target in enumerate(got):
        want = targets_lib.init(
            jax.random.fold_in(key, j),
            num_heads=h,
            num_layers=num_layers,
            width=d,
            causal=False,
        ).astype(np.float64)
        for name in ("wq", "wk", "wv", "wo", "wu"):
          a, b = getattr(target, name), getattr(want, name)
          self.assertEqual((a.dtype, a.shape), (b.dtype, b.shape), name)
          np.testing.assert_array_equal(a, b, err_msg=name)
        self.assertEqual(
            (target.causal, target.residual), (want.causal, want.residual)
        )


if __name__ == "__main__":
  absltest.main()
