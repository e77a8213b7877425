"""ut.training.implementation: the model's implementation switch and the step's
options on XLA CPU: microbatches, split frozen layers, compiler options."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.extend.core
import numpy as np

from tests import model_reference
from tests import xla_settings
from ut.cpu import forward as cpu_forward
from ut.errors import UserError
from ut.training import implementation


class ModelsTest(xla_settings.FastCompile, chex.TestCase):
  """Compiled with most XLA optimizations off (tests/xla_settings.py): the
  values are the same computation, and compiling is most of the time here."""

  def test_auto_impl_follows_the_backend(self):
    want = "xla_cpu" if jax.default_backend() == "cpu" else "reference"
    self.assertEqual(implementation.resolve_impl("auto"), want)
    for impl in ("reference", "xla_cpu"):
      self.assertEqual(implementation.resolve_impl(impl), impl)
    with self.assertRaisesRegex(UserError, "impl='gpu'.*reference.*xla_cpu"):
      implementation.resolve_impl("gpu")


class LastOnlyTest(xla_settings.FastCompile, parameterized.TestCase):
  """apply(..., last_only=True) is apply(...)[:, -1:], gradients included."""

  def test_split_layers_hold_the_stacked_maps_and_serve_the_form_only(self):
    spec = model_reference.make_spec(
        "random", "attn", num_layers=2, impl="xla_cpu"
    )
    params, tokens = model_reference.make_inputs(spec, seed=3)
    split = implementation.split_frozen(params, spec, model_reference.T)[
        "layers"
    ]
    for name in ("wq", "wk", "wv"):
      stacked = np.asarray(params["layers"][name])
      self.assertLen(split[name], stacked.shape[0])
      for l, stack in enumerate(split[name]):
        self.assertLen(stack, stacked.shape[1])
        for h, w in enumerate(stack):
          np.testing.assert_array_equal(w, stacked[l, h])
    # Where the model does not read split layers, params pass unchanged.
    for other in (
        dataclasses.replace(spec, impl="reference"),
        dataclasses.replace(spec, variant="res_ln"),
        model_reference.make_spec("trained", "attn", impl="xla_cpu"),
    ):
      self.assertFalse(implementation.splits_layers(other, model_reference.T))
      self.assertIs(
          implementation.split_frozen(params, other, model_reference.T), params
      )
    m_wide = dataclasses.replace(spec, m=4)  # Below the form's rule.
    self.assertFalse(cpu_forward.coefficient_form(m_wide, model_reference.T))
    with self.assertRaisesRegex(ValueError, "coefficient form only"):
      cpu_forward.apply(dict(params, layers=split), m_wide, tokens)


if __name__ == "__main__":
  absltest.main()
