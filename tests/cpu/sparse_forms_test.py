"""ut.cpu.sparse_forms: the sparse UT's two orders on XLA CPU against the
reference model, their multiply-add counts, and the rule that picks one."""

import dataclasses
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import model_reference
from tests import xla_settings
from ut.cpu import forward as cpu_forward
from ut.cpu import sparse_forms as cpu_sparse_forms
from ut.training import data as data_lib
from ut.training import models


def sparse_attn_spec(shape, **overrides):
  """The attention-only sparse kind at shape = (H, L, d, causal)."""
  h, num_layers, d, causal = shape
  return model_reference.make_spec(
      "sparse",
      "attn",
      num_heads=h,
      num_layers=num_layers,
      width=d,
      causal=causal,
      **overrides,
  )


def _last_rows(apply_fn, last_only):
  """apply_fn's logits, or their last row alone."""

  def rows(params, spec, tokens_BxT):
    logits = apply_fn(params, spec, tokens_BxT)
    return logits[:, -1:] if last_only else logits

  return rows


def _forced_order(paths, last_only):
  """models.apply with the sparse kind's order forced (traced under it)."""

  def forced(params, spec, tokens_BxT):
    with mock.patch.object(cpu_forward, "sparse_paths_form", lambda *_: paths):
      return models.apply(params, spec, tokens_BxT, last_only=last_only)

  return forced


# One function each, so that `logits_and_grads` compiles each once.
_FORCED_ORDER = {
    (paths, last_only): _forced_order(paths, last_only)
    for paths in (True, False)
    for last_only in (False, True)
}


_REFERENCE_ROWS = {
    last_only: _last_rows(model_reference.reference_apply, last_only)
    for last_only in (False, True)
}


class ModelsTest(xla_settings.FastCompile, chex.TestCase):
  """Compiled with most XLA optimizations off (tests/xla_settings.py): the
  values are the same computation, and compiling is most of the time here."""

  @parameterized.product(
      shape=model_reference.SPARSE_SHAPES,
      paths=(True, False),
      last_only=(False, True),
  )
  def test_sparse_attn_both_orders_match_reference(
      self, shape, paths, last_only
  ):
    """xla_cpu's attention-only sparse forward routed along head strings
    (`_apply_sparse_paths`) and by levels, whichever `sparse_paths_form`
    would pick here, against the reference's logits and gradients (float64;
    with last_only, the reference's last row)."""
    spec = sparse_attn_spec(shape)
    params, tokens = model_reference.make_inputs(spec, seed=3)
    with jax.enable_x64(True):
      p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
      want, want_grads = model_reference.logits_and_grads(
          _REFERENCE_ROWS[last_only], p64, spec, tokens
      )
      got, grads = model_reference.logits_and_grads(
          _FORCED_ORDER[paths, last_only],
          p64,
          dataclasses.replace(spec, impl="xla_cpu"),
          tokens,
      )
    self.assertEqual(got.shape[1], 1 if last_only else model_reference.T)
    np.testing.assert_allclose(
        got, want, atol=model_reference.F64_TOL, rtol=model_reference.F64_TOL
    )
    for (path, g), w in zip(
        jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(want_grads)
    ):
      np.testing.assert_allclose(
          g,
          w,
          atol=model_reference.F64_TOL,
          rtol=model_reference.F64_TOL,
          err_msg=jax.tree_util.keystr(path),
      )

  @parameterized.product(
      shape=model_reference.SPARSE_SHAPES, last_only=(False, True)
  )
  def test_sparse_string_costs_count_the_forwards_matmuls(
      self, shape, last_only
  ):
    """`sparse_string_costs` against the multiply-adds of every matmul each
    order's forward traces, per added string (batch 2B less batch B), less
    what it leaves aside: the unembedding (Q d C) for both, and the levels'
    one-hot token embedding (T V m)."""
    spec = sparse_attn_spec(shape, impl="xla_cpu")
    params, tokens = model_reference.make_inputs(spec, seed=3)

    def madds(paths, tokens):
      with mock.patch.object(
          cpu_forward, "sparse_paths_form", lambda *_: paths
      ):
        jaxpr = jax.make_jaxpr(
            lambda p: models.apply(p, spec, tokens, last_only=last_only)
        )(params)
      return model_reference.dot_flops(jaxpr.jaxpr) // 2

    per_string = {
        paths: (madds(paths, jnp.tile(tokens, (2, 1))) - madds(paths, tokens))
        // model_reference.B
        for paths in (True, False)
    }
    q = 1 if last_only else model_reference.T
    unembed = q * spec.sparse_ut.width * model_reference.CLASSES
    paths, levels = cpu_sparse_forms.sparse_string_costs(
        spec, model_reference.T, last_only
    )
    self.assertEqual(per_string[True], paths + unembed)
    self.assertEqual(
        per_string[False],
        levels
        + unembed
        + model_reference.T * model_reference.VOCAB * spec.model_width,
    )

  def test_sparse_paths_form_picks_by_multiply_adds(self):
    """On the protocols' configs: k-hop's attention-only sparse UT at k = 2
    and 3 routes along head strings (at most 1.2x the levels'
    multiply-adds), Dyck's (T = 61) and every other variant or kind the
    levels or their own forms."""
    cases = {
        (khop_config, "model=sparse,variant=attn,k=2"): True,
        (khop_config, "model=sparse,variant=attn,k=3"): True,
        (dyck_config, "model=sparse,variant=attn"): False,
        (khop_config, "model=sparse,variant=res_ln,k=2"): False,
        (khop_config, "model=random,variant=attn,k=2"): False,
    }
    for (module, arg), want in cases.items():
      config = module.get_config(arg)
      task = data_lib.make_task(config)
      spec = models.model_spec(config, task.info)
      n = data_lib.train_batch(config, task, 0)["tokens"].shape[1]
      paths, levels = (
          cpu_sparse_forms.sparse_string_costs(spec, n, spec.last_only)
          if spec.kind == "sparse"
          else (0, 0)
      )
      self.assertEqual(
          cpu_forward.sparse_paths_form(spec, n, spec.last_only),
          want,
          f"{arg}: paths {paths}, levels {levels} multiply-adds",
      )


if __name__ == "__main__":
  absltest.main()
