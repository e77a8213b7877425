"""Equivalence: a fixed UT with a compiled E reproduces the target (numpy reference)."""

import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

from tests import reference
from tests import simulate_helpers
from tests import test_cases
from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import instances
from ut.core import simulate
from ut.core.constructions import gaussian
from ut.core.constructions import sparse

# One padding for every equivalence case (L, H <= 3, d <= 3, m <= 1.25 N of
# H = 3, L = 3, d = 2): the padded checks share their compiled programs.
PADDING = simulate.Padding(num_layers=3, num_heads=3, width=4, ut_width=272)


def build_ut(case, target, m_factor=1.0):
  h, num_layers, d = case["num_heads"], case["num_layers"], case["width"]
  if case["construction"] == "sparse":
    ut = sparse.make_sparse_ut(h, num_layers, d)
    program, _ = compile_lib.compile_sparse(ut, target)
    if case["path"] == "dense":
      ut = sparse.to_dense(ut, np.float64)
    return ut, program
  n = bounds.random_threshold(
      h,
      num_layers,
      d,
      residual=case["residual"],
      shared=case["shared"] and case["residual"],
  )
  ut = gaussian.make_gaussian_ut(
      h, num_layers, math.ceil(m_factor * n), d, seed=1, shared=case["shared"]
  )
  program, report = compile_lib.compile_random(ut, target)
  assert report.exact, report
  return ut, program


class EquivalenceTest(parameterized.TestCase):

  @parameterized.named_parameters(*test_cases.CASES)
  def test_ut_matches_numpy_target(self, **case):
    self.check_case(case, padding=None)

  @parameterized.named_parameters(*test_cases.CASES)
  def test_padded_ut_matches_numpy_target(self, **case):
    # Zero-padded to PADDING (a sparse UT as its dense matrices): exact.
    self.check_case(case, padding=PADDING)

  def check_case(self, case, padding):
    num_heads, num_layers, width = (
        case["num_heads"],
        case["num_layers"],
        case["width"],
    )
    causal, looped, residual = case["causal"], case["looped"], case["residual"]
    construction = case["construction"]
    g = 3  # Targets checked at once (vmapped).
    pairs = [
        simulate_helpers.make_target(
            100 + i,
            num_heads=num_heads,
            num_layers=num_layers,
            width=width,
            causal=causal,
            looped=looped,
            residual=residual,
        )
        for i in range(g)
    ]
    x = np.random.default_rng(7).standard_normal((g, 2, 5, width))
    ref = np.stack(
        [
            reference.target_forward(w, xi, causal=causal, residual=residual)
            for (w, _), xi in zip(pairs, x)
        ]
    )
    built = [build_ut(case, t) for _, t in pairs]
    # The same UT serves every target: only the programs differ.
    ut = built[0][0]
    result = simulate.check(
        ut,
        simulate.stack([b[1] for b in built]),
        simulate.stack([t for _, t in pairs]),
        x,
        padding=padding,
    )
    np.testing.assert_allclose(result["reference"], ref, atol=1e-12, rtol=0)
    y64 = result["float64"]["output"]
    chex.assert_shape(y64, ref.shape)
    np.testing.assert_allclose(y64, ref, atol=simulate_helpers.F64_ATOL, rtol=0)
    self.assertLessEqual(
        result["float64"]["max_abs_err"], simulate_helpers.F64_ATOL
    )
    if construction == "random":  # float32 needs a little width above N.
      built = [build_ut(case, t, m_factor=1.25) for _, t in pairs]
      result = simulate.check(
          built[0][0],
          simulate.stack([b[1] for b in built]),
          simulate.stack([t for _, t in pairs]),
          x,
          dtypes=("float32",),
          padding=padding,
      )
    y32 = result["float32"]["output"]
    self.assertEqual(y32.dtype, np.float32)
    rel = np.abs(y32 - ref).max() / np.abs(ref).max()
    self.assertLessEqual(rel, simulate_helpers.F32_RTOL)


class PaddingTest(parameterized.TestCase):
  """Classes that fit one `Padding` share their compiled programs."""

  def test_paddings_group_classes_by_ut_width(self):
    pads = simulate.paddings(
        [(1, 1, 4, 12), (2, 3, 4, 144), (2, 2, 8, 128), (3, 3, 8, 600)]
    )
    small = simulate.Padding(num_layers=3, num_heads=2, width=8, ut_width=144)
    self.assertEqual(pads, [small] * 3 + [simulate.Padding(3, 3, 8, 600)])

  def test_classes_of_one_padding_compile_once(self):
    classes = [(1, 1, 3), (2, 3, 2), (3, 2, 3)]
    padding = simulate.Padding(3, 3, 3, 99)  # N of (3, 2, 3): the widest.
    jax.clear_caches()  # So that the first class compiles.
    for i, (h, num_layers, d) in enumerate(classes):
      gens = instances.random_targets(h, num_layers, d, num=2, seed=i)
      x = np.random.default_rng(i).standard_normal((2, 3, 5, d))
      with simulate_helpers.count_compiles() as compiles:
        for name in ("sparse", "random"):
          built = [instances.build(t, name) for t in gens]
          result = simulate.check(
              built[0][0],
              simulate.stack([b[1] for b in built]),
              simulate.stack(gens),
              x,
              padding=padding,
          )
          self.assertLessEqual(
              result["float64"]["max_abs_err"], simulate_helpers.F64_ATOL
          )
      if i == 0:  # The target in float64, the UT in float32 and float64.
        self.assertGreaterEqual(compiles[0], 3)
      else:
        self.assertEqual(compiles[0], 0, (h, num_layers, d))

  def test_padding_smaller_than_the_class_is_refused(self):
    _, target = simulate_helpers.make_target(
        0,
        num_heads=2,
        num_layers=2,
        width=2,
        causal=True,
        looped=False,
        residual=False,
    )
    ut = sparse.make_sparse_ut(2, 2, 2)
    program, _ = compile_lib.compile_sparse(ut, target)
    args = (ut, simulate.stack([program]), simulate.stack([target]))
    x = np.ones((1, 1, 3, 2))
    with self.assertRaisesRegex(ValueError, "smaller than the targets"):
      simulate.check(*args, x, padding=simulate.Padding(1, 2, 2, ut.m))
    with self.assertRaisesRegex(ValueError, "cannot pad"):
      simulate.check(*args, x, padding=simulate.Padding(2, 2, 2, ut.m - 1))


class CheckCompileTest(absltest.TestCase):

  def test_cpu_programs_compile_with_the_cpu_options_once(self):
    made = []
    real_jit = jax.jit

    def spy_jit(fn, **kwargs):
      made.append(kwargs)
      return real_jit(fn, **kwargs)

    with mock.patch.object(jax, "jit", spy_jit):
      double = simulate._check_jit(static_argnames=("k",))(lambda x, k: k * x)
      self.assertEqual(float(double(np.float32(2), k=3)), 6.0)
      self.assertEqual(float(double(np.float32(1), k=2)), 2.0)
    self.assertLen(made, 1)  # One jitted function per backend.
    want = (
        simulate.CPU_COMPILER_OPTIONS
        if jax.default_backend() == "cpu"
        else None
    )
    self.assertEqual(made[0]["compiler_options"], want)
    self.assertEqual(made[0]["static_argnames"], ("k",))


class StackTest(absltest.TestCase):

  def test_one_tree_is_a_read_only_view_and_several_are_stacked(self):
    rng = np.random.default_rng(0)
    trees = [dict(e=rng.normal(size=(3, 5)), n=np.int32(i)) for i in range(2)]
    one = simulate.stack(trees[:1])
    np.testing.assert_array_equal(one["e"], np.stack([trees[0]["e"]]))
    np.testing.assert_array_equal(one["n"], [0])
    self.assertTrue(np.shares_memory(one["e"], trees[0]["e"]))
    self.assertFalse(one["e"].flags.writeable)
    two = simulate.stack(trees)
    np.testing.assert_array_equal(two["e"], np.stack([t["e"] for t in trees]))
    np.testing.assert_array_equal(two["n"], [0, 1])


if __name__ == "__main__":
  absltest.main()
