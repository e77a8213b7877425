"""ut.experiments.threshold.attention: the UT's attention maps against the
target's, and the comparison's plot."""

import os
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import targets as targets_lib
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.experiments import threshold

INEXACT = 1e-3  # Issue: relative error at m = N - 1, for every target.


class LibraryTest(parameterized.TestCase):

  def test_attention_maps_match_the_target(self):
    h, num_layers, d = 2, 2, 3
    with jax.enable_x64(True):
      target = threshold.random_targets(h, num_layers, d, num=1, seed=5)[0]
      x = np.random.default_rng(1).standard_normal((2, 6, d))
      want = threshold.attention_maps(
          threshold.target_params(target), x, num_layers=num_layers, causal=True
      )
      self.assertEqual(want.shape, (num_layers, 2, h, 6, 6))
      np.testing.assert_allclose(want.sum(-1), 1.0, atol=1e-12)
      self.assertEqual(np.abs(np.triu(want, 1)).max(), 0.0)
      sparse_ut = sparse.make_sparse_ut(h, num_layers, d)
      program, _ = compile_lib.compile_sparse(sparse_ut, target)
      n = bounds.random_threshold(h, num_layers, d)
      got = {
          "sparse": dict(
              sparse.to_dense(sparse_ut, np.float64), embed=program["embed"]
          )
      }
      for m in (n, n - 1):
        ut = gaussian.make_gaussian_ut(h, num_layers, m, d, seed=2)
        with warnings.catch_warnings(record=True) as caught:
          warnings.simplefilter("always")
          program, _ = compile_lib.compile_random(ut, target)
        self.assertEqual(bool(caught), m < n)  # Below N the fit is inexact.
        got[m] = dict(ut, embed=program["embed"])
      maps = {
          k: threshold.attention_maps(p, x, num_layers=num_layers, causal=True)
          for k, p in got.items()
      }
    np.testing.assert_allclose(maps["sparse"], want, atol=1e-12)
    np.testing.assert_allclose(maps[n], want, atol=1e-9)
    self.assertGreater(np.abs(maps[n - 1] - want).max(), INEXACT)

  def test_attention_comparison_of_a_residual_target_uses_its_n(self):
    n = bounds.random_threshold(2, 2, 3, residual=True)
    self.assertGreater(n, bounds.random_threshold(2, 2, 3))
    with jax.enable_x64(True):
      target = targets_lib.init(
          jax.random.PRNGKey(4),
          num_heads=2,
          num_layers=2,
          width=3,
          looped=True,
          residual=True,
          dtype=jax.numpy.float64,
      )
      x = np.random.default_rng(0).standard_normal((1, 5, 3))
      maps = threshold.attention_comparison(target, x)
    [at_n] = [k for k in maps if f"m={n} " in k]
    self.assertIn(f"N={n}", at_n)
    np.testing.assert_allclose(maps[at_n], maps["target"], atol=1e-9)

  def test_attention_comparison_and_plot(self):
    with jax.enable_x64(True):
      target = threshold.random_targets(2, 2, 2, num=1, seed=0)[0]
      x = np.random.default_rng(0).standard_normal((1, 4, 2))
      maps = threshold.attention_comparison(target, x)
    self.assertLen(maps, 4)  # Target, sparse, random at N and N - 1.
    self.assertEqual(list(maps)[0], "target")
    path = os.path.join(self.create_tempdir().full_path, "attention.png")
    threshold.plot_attention(maps, layer=2, head=2, path=path)
    with open(path, "rb") as f:
      self.assertTrue(f.read().startswith(b"\x89PNG"))
    with self.assertRaisesRegex(ValueError, r"layers 1..2 and heads 1..2"):
      threshold.plot_attention(maps, layer=3, head=1)


if __name__ == "__main__":
  absltest.main()
