"""Equivalence: a fixed UT with a compiled E reproduces the target (numpy reference)."""

import contextlib
import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from configs import simulate as simulate_config
from tests import reference
from tests import test_cases
from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import instances
from ut.core import simulate
from ut.core import targets as targets_lib
from ut.core import transformer
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError
from ut.experiments import simulate_table

F64_ATOL = 1e-9  # Issue: float64 max abs error <= 1e-9.
F32_RTOL = 1e-4  # Issue: float32 <= 1e-4 relative (sparse; random at 1.25 N).
# One padding for every equivalence case (L, H <= 3, d <= 3, m <= 1.25 N of
# H = 3, L = 3, d = 2): the padded checks share their compiled programs.
PADDING = simulate.Padding(num_layers=3, num_heads=3, width=4, ut_width=272)

_COUNTERS = []  # The compile counters active now.


def _on_duration(event, seconds, **kwargs):
  del seconds, kwargs
  if event == "/jax/core/compile/backend_compile_duration":
    for counter in _COUNTERS:
      counter[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


@contextlib.contextmanager
def count_compiles():
  """Counts XLA compilations while active: `with count_compiles() as n`, then
  n[0]. Deterministic: a program found in JAX's caches is not compiled."""
  counter = [0]
  _COUNTERS.append(counter)
  try:
    yield counter
  finally:
    _COUNTERS.remove(counter)


def make_target(
    seed,
    *,
    num_heads,
    num_layers,
    width,
    causal,
    looped,
    residual,
    out_width=None,
):
  w = reference.random_target(
      np.random.default_rng(seed),
      num_heads=num_heads,
      num_layers=num_layers,
      width=width,
      looped=looped,
      out_width=out_width,
  )
  w.setdefault("wu", np.eye(width))
  return w, targets_lib.Target(**w, causal=causal, residual=residual)


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
        make_target(
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
    np.testing.assert_allclose(y64, ref, atol=F64_ATOL, rtol=0)
    self.assertLessEqual(result["float64"]["max_abs_err"], F64_ATOL)
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
    self.assertLessEqual(rel, F32_RTOL)


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

  def test_size_formulas_take_numpy_integers_only_positive(self):
    # ModelSpec accepts numpy integers; the formulas it calls must too.
    self.assertEqual(
        bounds.sparse_width(np.int64(2), np.int32(3), np.int64(2)),
        bounds.sparse_width(2, 3, 2),
    )
    for bad in (True, 2.0, 0):
      with self.assertRaisesRegex(UserError, "H=.* must be a positive integer"):
        bounds.sparse_width(bad, 3, 2)


class ThresholdTest(parameterized.TestCase):

  @parameterized.parameters((1, 2, 3), (2, 2, 2), (2, 3, 2), (3, 2, 2))
  def test_exact_at_n_not_below(self, h, num_layers, d):
    w, target = make_target(
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
    _, target = make_target(
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
      with count_compiles() as compiles:
        for name in ("sparse", "random"):
          built = [instances.build(t, name) for t in gens]
          result = simulate.check(
              built[0][0],
              simulate.stack([b[1] for b in built]),
              simulate.stack(gens),
              x,
              padding=padding,
          )
          self.assertLessEqual(result["float64"]["max_abs_err"], F64_ATOL)
      if i == 0:  # The target in float64, the UT in float32 and float64.
        self.assertGreaterEqual(compiles[0], 3)
      else:
        self.assertEqual(compiles[0], 0, (h, num_layers, d))

  def test_padding_smaller_than_the_class_is_refused(self):
    _, target = make_target(
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

  def test_random_targets_are_init_s_and_compile_once(self):
    jax.clear_caches()
    # (2, 4, 7): 392 weights each, more than one draw of _MIN_DRAW holds.
    classes = [(1, 1, 4), (3, 2, 2), (2, 4, 7)]
    for i, (h, num_layers, d) in enumerate(classes):
      with count_compiles() as compiles:
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

  def test_table_rows_of_one_padding_compile_once(self):
    config = simulate_config.get_config("smoke")
    grid = ((1, 2, 3), (2, 2, 2), (2, 1, 3))
    pads = simulate_table.table_paddings(grid)
    self.assertLen(set(pads), 1)
    jax.clear_caches()
    with jax.enable_x64(True):  # As launch.simulate runs the table.
      for i, ((h, num_layers, d), padding) in enumerate(zip(grid, pads)):
        with count_compiles() as compiles:
          row = simulate_table.table_row(h, num_layers, d, config, padding)
        if i:
          self.assertEqual(compiles[0], 0, (h, num_layers, d))
        self.assertLessEqual(row["sparse_f64_abs"], F64_ATOL)
        self.assertLessEqual(row["random_f64_abs"], F64_ATOL)
        self.assertLessEqual(row["sparse_f32_rel"], F32_RTOL)
        self.assertEqual(row["min_exact_m"], row["N"])


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
    w, target = make_target(
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

  def test_sparse_refuses_per_layer_residual(self):
    _, target = make_target(
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
