"""The pinned JAX computes large-row reductions right under jit (issue 47).

jax/jaxlib 0.10.2 miscompile, on CPU, a vmapped matrix-vector product followed
by a reduction once there are more than 2^14 (float64) or 2^15 (float32) rows
(jax-ml/jax#39103): jit and eager disagree, silently. setup.cfg pins 0.10.1,
which the report names correct. This file runs the upstream reproducer and
`ut`'s own reductions of that shape, each jitted at sizes past the trigger,
against eager JAX and against float64 NumPy. On 0.10.2 the reproducer's cases
fail here. Also: the installed ml_dtypes is setup.cfg's pin (0.7.0's import
alone took about 0.7 s: docs/performance.md, "Host settings").
"""

import os
import re

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from ut.cpu import coefficients
from ut.cpu import kernels
from ut.training import models

# Past the trigger: 2^14 + 1 rows in float64, 2^15 + 1 in float32.
ROWS = {"float64": 16_385, "float32": 32_769}


def _upstream(x_Nx3):
  """jax-ml/jax#39103's function: per row, sum((I_3 @ row)^2)."""
  eye = jnp.eye(3, dtype=x_Nx3.dtype)
  return jax.vmap(lambda row: jnp.sum((eye @ row) ** 2))(x_Nx3)


class JaxPinTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.enable_x64(True))

  @parameterized.named_parameters(
      ("float64", "float64"), ("float32", "float32")
  )
  def test_upstream_reproducer(self, dtype):
    n = ROWS[dtype]
    i = jnp.arange(n, dtype=dtype)
    x = jnp.stack((i, jnp.zeros_like(i), jnp.zeros_like(i)), axis=1)
    # Each row's sum is one square plus zeros: IEEE rounds it as NumPy does.
    expected = np.square(np.arange(n).astype(dtype))
    eager = np.asarray(_upstream(x))
    jitted = np.asarray(jax.jit(_upstream)(x))
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(
        jitted,
        expected,
        err_msg=f"jax {jax.__version__}: jit differs from eager (jax#39103)",
    )

  @parameterized.named_parameters(
      ("float64", "float64"), ("float32", "float32")
  )
  def test_layer_norm_row_sums(self, dtype):
    """kernels.level_stats' row sums (matmuls with a ones vector) over more
    rows than the trigger, and the models' LayerNorm, jitted."""
    # (B, T, M) with B * T rows past the trigger; M = 3 as upstream.
    b, t = ROWS[dtype] // 32 + 1, 32
    z = np.random.default_rng(0).integers(-8, 9, size=(b, t, 3)).astype(dtype)
    expected_mean = z.astype(np.float64).mean(-1, keepdims=True)
    expected_var = np.square(z - expected_mean).mean(-1, keepdims=True)
    tol = dict(float64=1e-12, float32=1e-5)[dtype]
    for name, fn in [
        ("level_stats", lambda z: kernels.level_stats([z])),
        ("jit(level_stats)", jax.jit(lambda z: kernels.level_stats([z]))),
    ]:
      mean, inv = fn(jnp.asarray(z))
      np.testing.assert_allclose(
          mean, expected_mean, atol=tol, err_msg=f"{name} mean"
      )
      np.testing.assert_allclose(
          inv,
          1 / np.sqrt(expected_var + kernels.LN_EPS),
          rtol=tol,
          err_msg=f"{name} 1/std",
      )
    expected_ln = (z - expected_mean) / np.sqrt(expected_var + 1e-5)
    for name, fn in [
        ("layer_norm", models.layer_norm),
        ("jit(layer_norm)", jax.jit(models.layer_norm)),
        ("jit(kernels.layer_norm)", jax.jit(kernels.layer_norm)),
    ]:
      np.testing.assert_allclose(
          fn(jnp.asarray(z)), expected_ln, atol=10 * tol, err_msg=name
      )

  def test_residual_coefficient_variance(self):
    """The random UT's res_ln coefficient form (ut.cpu.coefficients) computes
    each row's variance as (lhs G * lhs).sum(-1): a vmapped matrix-vector
    product and a reduction over B * T rows. Its logits, jitted at 2^14 + 1
    rows and more, against the reference (M-wide) forward, all in float64."""
    spec = models.ModelSpec(
        kind="random",
        variant="res_ln",
        vocab_size=4,
        num_classes=3,
        max_len=8,
        num_layers=1,
        num_heads=1,
        width=3,
        m=6,
        impl="reference",
    )
    params = models.init(jax.random.key(0), spec, dtype=jnp.float64)
    b, t = ROWS["float64"] // 8 + 1, 8
    tokens = jax.random.randint(jax.random.key(1), (b, t), 0, 4)
    reference = models.apply(params, spec, tokens)
    form = coefficients._random_residual_coefficients  # pylint: disable=protected-access
    for name, fn in [
        ("eager", form),
        ("jit", jax.jit(form, static_argnums=(1, 3))),
    ]:
      np.testing.assert_allclose(
          fn(params, spec, tokens, None), reference, atol=1e-10, err_msg=name
      )


class MlDtypesPinTest(absltest.TestCase):

  def test_installed_ml_dtypes_is_the_pin(self):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "setup.cfg")) as f:
      pinned = re.search(r"ml_dtypes==([0-9.]+)", f.read()).group(1)
    self.assertEqual(
        ml_dtypes.__version__,
        pinned,
        "pip install -e . installs setup.cfg's ml_dtypes",
    )


if __name__ == "__main__":
  absltest.main()
