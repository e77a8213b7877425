"""ut.cpu.coefficients: the random UT's coefficient forms against the reference
model, their multiply-add counts, and the rules that pick them."""

import dataclasses
import functools
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import model_reference
from tests import xla_settings
from ut.cpu import coefficients as cpu_coefficients
from ut.cpu import forward as cpu_forward
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models


def ce_logits_and_grads(spec, tokens):
  """A jitted (params, apply, last_only) -> (logits, gradients) of a
  cross-entropy on the logits `apply(params, spec, tokens, last_only=...)`
  returns (labels: tokens % CLASSES); apply and last_only are static."""
  labels = tokens % model_reference.CLASSES

  @functools.partial(jax.jit, static_argnums=(1, 2))
  def logits_and_grads(p, apply, last_only):
    def loss(p):
      logits = apply(p, spec, tokens, last_only=last_only)
      rows = labels[:, -logits.shape[1] :]
      logp = jax.nn.log_softmax(logits)
      ce = -jnp.take_along_axis(logp, rows[..., None], -1).sum()
      return ce, logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(p)
    return logits, grads

  return logits_and_grads


def assert_trainable_match(got, want, msg):
  """(logits, grads) against (logits, grads): the logits and the gradients
  of E and U within LAST_ONLY_TOL (relative to each gradient's largest)."""
  np.testing.assert_allclose(
      got[0],
      want[0],
      atol=model_reference.LAST_ONLY_TOL,
      rtol=model_reference.LAST_ONLY_TOL,
      err_msg=msg,
  )
  for name, g, w in (
      ("token", got[1]["embed"]["token"], want[1]["embed"]["token"]),
      ("position", got[1]["embed"]["position"], want[1]["embed"]["position"]),
      ("unembed", got[1]["unembed"], want[1]["unembed"]),
  ):
    np.testing.assert_allclose(
        g,
        w,
        atol=model_reference.LAST_ONLY_TOL * np.abs(w).max(),
        rtol=model_reference.LAST_ONLY_TOL,
        err_msg=f"{msg} {name}",
    )


class LastOnlyTest(xla_settings.FastCompile, parameterized.TestCase):
  """apply(..., last_only=True) is apply(...)[:, -1:], gradients included."""

  @parameterized.product(num_layers=(1, 2, 3), causal=(True, False))
  def test_random_attn_coefficient_form(self, num_layers, causal):
    """The attention-only random UT without an m-wide state
    (`ut.cpu.coefficients._random_attn_coefficients`, which xla_cpu's apply
    takes here), and the m-wide order it replaces (`apply_m_wide`), against
    the reference, float64: every row's logits and the last row's alone,
    and the gradients of a cross-entropy on them w.r.t. E and U."""
    self.check_coefficient_form(num_layers=num_layers, causal=causal)

  @parameterized.named_parameters(
      # 2^3 (T + V) = 88 <= m: four layers of one shared (looped) stack.
      ("four_looped_layers", dict(num_layers=4, shared=True, m=96)),
      ("three_heads", dict(num_heads=3, num_layers=2)),
      ("one_token", dict(num_layers=3, t=1)),
  )
  def test_random_attn_coefficient_form_other_shapes(self, overrides):
    self.check_coefficient_form(**overrides)

  def check_coefficient_form(self, t=model_reference.T, **spec_overrides):
    spec = model_reference.make_spec(
        "random", "attn", impl="xla_cpu", **spec_overrides
    )
    self.assertTrue(cpu_forward.coefficient_form(spec, t))
    ref = dataclasses.replace(spec, impl="reference")
    params, tokens = model_reference.make_inputs(
        ref, seed=5 + spec.num_layers, t=t
    )
    logits_and_grads = ce_logits_and_grads(spec, tokens)
    ref_apply = lambda p, s, x, last_only: models.apply(
        p, ref, x, last_only=last_only
    )
    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
      # The frozen maps one array per stack and head (what `step_lib.make_step`
      # passes the step), read by the same forward.
      split = implementation.split_frozen(p64, spec, t)
      self.assertTrue(cpu_forward.is_split(split["layers"]))
      for last_only in (False, True):
        want = logits_and_grads(p64, ref_apply, last_only)
        self.assertGreater(np.abs(want[1]["embed"]["position"]).max(), 1e-6)
        for name, apply, p in (
            ("stacked", models.apply, p64),
            ("m_wide", cpu_forward.apply_m_wide, p64),
            ("split", models.apply, split),
        ):
          assert_trainable_match(
              logits_and_grads(p, apply, last_only),
              want,
              f"{name} last_only={last_only}",
          )

  @parameterized.product(num_layers=(1, 2, 3), causal=(True, False))
  def test_random_residual_coefficient_form(self, num_layers, causal):
    """The random UT with res_ln in coefficient form
    (`ut.cpu.coefficients._random_residual_coefficients`, which xla_cpu's apply
    takes here) and the m-wide order against the reference, float64: every
    row's logits and the last row's alone, and the gradients of a
    cross-entropy on them w.r.t. E and U."""
    self.check_residual_form(num_layers=num_layers, causal=causal)

  @parameterized.named_parameters(
      ("three_looped_layers", dict(num_layers=3, shared=True)),
      ("three_heads", dict(num_heads=3, num_layers=2)),
      ("one_token", dict(num_layers=2, t=1)),
      # Narrower than its coefficient state (P = 11, 33, 99).
      ("narrow", dict(num_layers=3, m=20)),
  )
  def test_random_residual_coefficient_form_other_shapes(self, overrides):
    self.check_residual_form(**overrides)

  def check_residual_form(self, t=model_reference.T, **spec_overrides):
    spec = model_reference.make_spec(
        "random", "res_ln", impl="xla_cpu", **spec_overrides
    )
    ref = dataclasses.replace(spec, impl="reference")
    params, tokens = model_reference.make_inputs(
        ref, seed=7 + spec.num_layers, t=t
    )
    logits_and_grads = ce_logits_and_grads(spec, tokens)
    ref_apply = lambda p, s, x, last_only: models.apply(
        p, ref, x, last_only=last_only
    )

    def forced(form):  # models.apply with the form's rule forced: the rule
      # holds for wide UTs and large batches only.
      def apply(p, s, x, last_only):
        with mock.patch.object(
            cpu_forward, "residual_coefficient_form", lambda *_: form
        ):
          return models.apply(p, s, x, last_only=last_only)

      return apply

    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
      for last_only in (False, True):
        want = logits_and_grads(p64, ref_apply, last_only)
        self.assertGreater(np.abs(want[1]["embed"]["position"]).max(), 1e-6)
        for name, form in (("form", True), ("m_wide", False)):
          assert_trainable_match(
              logits_and_grads(p64, forced(form), last_only),
              want,
              f"{name} last_only={last_only}",
          )

  @parameterized.product(num_layers=(2, 3), last_only=(False, True))
  def test_residual_costs_count_the_forwards_matmuls(
      self, num_layers, last_only
  ):
    """`residual_costs` against the multiply-adds of every matmul each order
    traces, less what it leaves aside: the unembedding (B Q M C) and the
    final LayerNorm's row sums (2 B Q M) for both; in the m-wide order also
    the one-hot token embedding (B T V M) and each layer's LayerNorm row sums
    (2 B T M). P_l = (T + V) 3^l = 11 3^l here."""
    spec = model_reference.make_spec(
        "random", "res_ln", impl="xla_cpu", num_layers=num_layers
    )
    params, tokens = model_reference.make_inputs(spec, seed=3)

    def madds(form, tokens=tokens):
      with mock.patch.object(
          cpu_forward, "residual_coefficient_form", lambda *_: form
      ):
        jaxpr = jax.make_jaxpr(
            lambda p: models.apply(p, spec, tokens, last_only=last_only)
        )(params)
      return model_reference.dot_flops(jaxpr.jaxpr) // 2

    m, q = spec.model_width, 1 if last_only else model_reference.T
    aside = (
        model_reference.B * q * m * model_reference.CLASSES
        + 2 * model_reference.B * q * m
    )
    coefficient, rows, m_wide = cpu_coefficients.residual_costs(
        spec, model_reference.B, model_reference.T, last_only
    )
    self.assertEqual(madds(True), coefficient + aside)
    # The per-row part: what a second batch adds, less its last state.
    last_state = (
        model_reference.B
        * q
        * (1 + spec.num_heads)
        * 11
        * 3 ** (num_layers - 1)
        * m
    )
    self.assertEqual(
        madds(True, jnp.tile(tokens, (2, 1))) - madds(True),
        rows + last_state + aside,
    )
    self.assertEqual(
        madds(False),
        m_wide
        + aside
        + model_reference.B * model_reference.T * model_reference.VOCAB * m
        + num_layers * 2 * model_reference.B * model_reference.T * m,
    )

  def test_residual_coefficient_form_picks_by_multiply_adds(self):
    """On k-hop's random UT with res_ln (batch 32, 32 tokens): the form at
    the benchmarked m = 928 and up at k = 2 and m = 400 and up at k = 1, not
    at m = 632 or the k-hop table's m = 256, nor with another variant or on
    the Dyck table (m = 256, 61 tokens, the loss on the last row: most of
    the form's work per row)."""
    cases = {
        ("model=random,variant=res_ln,k=2", 256): False,
        ("model=random,variant=res_ln,k=2", 632): False,
        ("model=random,variant=res_ln,k=2", 928): True,
        ("model=random,variant=res_ln,k=2", 1264): True,
        ("model=random,variant=res_ln,k=2", 2528): True,
        ("model=random,variant=res_ln,k=1", 400): True,
        ("model=random,variant=res_ln,k=1", 200): False,
        ("model=random,variant=res_ln_mlp,k=2", 2528): False,
        ("model=random,variant=attn,k=2", 2528): False,
    }
    for (arg, m), want in cases.items():
      config = khop_config.get_config(arg)
      config.model.m = m
      task = data_lib.make_task(config)
      spec = models.model_spec(config, task.info)
      b, t = data_lib.train_batch(config, task, 0)["tokens"].shape
      self.assertEqual((b, t), (32, 32))
      costs = cpu_coefficients.residual_costs(spec, b, t)
      self.assertEqual(
          cpu_forward.residual_coefficient_form(spec, b, t),
          want,
          f"{arg} m={m}: {costs} multiply-adds",
      )
      # The training step then takes the batch whole.
      if want:
        self.assertEqual(implementation.microbatches(b, t, spec), 1)
    config = dyck_config.get_config("model=random,variant=res_ln")
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    b, t = data_lib.train_batch(config, task, 0)["tokens"].shape
    self.assertFalse(
        cpu_forward.residual_coefficient_form(spec, b, t, spec.last_only)
    )

  def test_random_attn_coefficient_form_never_forms_an_m_wide_state(self):
    """At m = 256, large beside T and V, the two-layer UT's matmuls cost per
    added string less than forming layer 1's m-wide output from its
    P = H (T + V) coefficients (2 T P m), let alone the value product of the
    m-wide order (2 T m^2 H); and the rule that picks the form."""
    spec = model_reference.make_spec(
        "random", "attn", num_layers=2, m=256, impl="xla_cpu"
    )
    params, tokens = model_reference.make_inputs(spec, seed=5)

    def flops(tokens):
      return model_reference.dot_flops(
          jax.make_jaxpr(
              lambda p: models.apply(p, spec, tokens, last_only=True)
          )(params).jaxpr
      )

    added = flops(jnp.tile(tokens, (2, 1))) - flops(tokens)
    self.assertLess(
        added,
        2
        * model_reference.B
        * model_reference.T
        * 2
        * (model_reference.T + model_reference.VOCAB)
        * 256,
    )
    self.assertTrue(cpu_forward.coefficient_form(spec, model_reference.T))
    self.assertEqual(
        cpu_coefficients.coefficient_widths(spec, model_reference.T),
        [
            model_reference.T + model_reference.VOCAB,
            2 * (model_reference.T + model_reference.VOCAB),
        ],
    )
    # The rule: at most half the M-wide order's multiply-adds per string,
    # counted by hand here for H = 2, K = 8, T = 6, P_l = 11 and 22.
    hand = 6 * 2 * sum(2 * p * 8 + 6 * 8 + 6 * p for p in (11, 22))
    for m, want in ((4, False), (16, False), (20, True), (52, True)):
      at_m = dataclasses.replace(spec, m=m)
      self.assertEqual(
          cpu_coefficients.string_costs(at_m, model_reference.T),
          (hand, 2 * 6 * 2 * (2 * m * 8 + 6 * 8 + m * m + 6 * m)),
      )
      self.assertEqual(
          cpu_forward.coefficient_form(at_m, model_reference.T), want, m
      )
    # Narrower than its widest coefficient state (22), and still the form.
    self.check_coefficient_form(m=20, num_layers=2)
    self.assertFalse(
        cpu_forward.coefficient_form(
            dataclasses.replace(spec, variant="res_ln"), model_reference.T
        )
    )


if __name__ == "__main__":
  absltest.main()
