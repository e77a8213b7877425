"""ut.core.compile: the random UT is exact at N and not below, the search
finds N, and the sparse UT refuses what it cannot compile."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from tests import reference
from tests import simulate_helpers
from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import simulate
from ut.core.constructions import gaussian
from ut.core.constructions import sparse


class ThresholdTest(parameterized.TestCase):

  @parameterized.parameters((1, 2, 3), (2, 2, 2), (2, 3, 2), (3, 2, 2))
  def test_exact_at_n_not_below(self, h, num_layers, d):
    w, target = simulate_helpers.make_target(
        5,
        num_heads=h,
        num_layers=num_layers,
        width=d,
        causal=True,
        looped=False,
        residual=False,
    )
    x = np.random.default_rng(3).standard_normal((1, 4, 6, d))
    ref = reference.target_forward(w, x[0], causal=True, residual=False)
    n = bounds.random_threshold(h, num_layers, d)
    errs = {}
    for m in (n, n - 1):
      ut = gaussian.make_gaussian_ut(h, num_layers, m, d, seed=0)
      if m < n:
        with self.assertWarnsRegex(UserWarning, "below N"):
          program, report = compile_lib.compile_random(ut, target)
        self.assertFalse(report.exact)
      else:
        program, report = compile_lib.compile_random(ut, target)
        self.assertTrue(report.exact)
      self.assertEqual(report.num_conditions, n)
      y = simulate.check(
          ut,
          simulate.stack([program]),
          simulate.stack([target]),
          x,
          dtypes=("float64",),
      )["float64"]["output"][0]
      errs[m] = np.abs(y - ref).max()
    self.assertLess(errs[n], 1e-9)
    self.assertGreater(errs[n - 1], 1e-3)  # Clearly not a simulation.

  def test_search_finds_n(self):
    _, target = simulate_helpers.make_target(
        9,
        num_heads=2,
        num_layers=2,
        width=2,
        causal=True,
        looped=False,
        residual=False,
    )
    m, probes = compile_lib.smallest_exact_width(target, seed=0)
    self.assertEqual(m, bounds.random_threshold(2, 2, 2))
    self.assertGreater(probes, 1)


class TargetApplyTest(parameterized.TestCase):

  def test_sparse_refuses_per_layer_residual(self):
    _, target = simulate_helpers.make_target(
        1,
        num_heads=2,
        num_layers=2,
        width=2,
        causal=True,
        looped=False,
        residual=True,
    )
    with self.assertRaisesRegex(ValueError, "looped.*random"):
      compile_lib.compile_sparse(sparse.make_sparse_ut(2, 2, 2), target)


if __name__ == "__main__":
  absltest.main()
