"""ut.training.implementation: the model's implementation switch and the step's
options on XLA CPU: microbatches, split frozen layers, compiler options."""

import dataclasses
import os
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

from configs import cpu as cpu_config
from configs import dyck as dyck_config
from tests import cli_helpers
from tests import model_reference
from tests import train_helpers
from tests import xla_settings
from ut.cpu import forward as cpu_forward
from ut.cpu import host
from ut.errors import UserError
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib
from ut.training import train


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  def test_default_microbatches_by_state_size(self):
    # A string counts T x width + H x T^2 elements (its attention scores); a
    # part holds about 2^17 of them (sparse, trained) or 5 m^2 (random UT).
    spec = lambda kind, **kw: models.ModelSpec(kind, "res_ln", 6, 32, 4, **kw)
    sparse_k4 = spec("sparse", num_layers=5, width=32)  # m = 4000.
    self.assertEqual(sparse_k4.model_width, 4000)
    # 32 x (32 x 4000 + 2 x 32^2) / 2^17 = 31.75: the largest divisor is 16.
    self.assertEqual(implementation.microbatches(32, 32, sparse_k4), 16)
    # 256 x (64 x 256 + 2 x 64^2) / (5 x 256^2) = 19.2.
    self.assertEqual(implementation.microbatches(256, 64, spec("random")), 16)
    self.assertEqual(
        implementation.microbatches(32, 32, spec("trained", width=64)), 1
    )
    self.assertEqual(implementation.microbatches(32, 32, spec("random")), 1)
    # An MLP's hidden width counts: 64 x (64 x 512 + 2 x 64^2) / (5 x 256^2)
    # = 8, against 4 without the MLP.
    mlp = models.ModelSpec("random", "res_ln_mlp", 6, 64, 4, mlp_ratio=1)
    self.assertEqual(implementation.microbatches(64, 64, mlp), 8)
    self.assertEqual(implementation.microbatches(64, 64, spec("random")), 4)
    # The attention scores count: 128 x (61 x 64 + 2 x 61^2) / 2^17 = 11.1
    # (3.8 without them).
    trained = models.ModelSpec("trained", "attn", 4, 61, 2, width=64)
    self.assertEqual(implementation.microbatches(128, 61, trained), 8)
    # The random UT's budget grows with m^2: 128 x (61 x 512 + 2 x 61^2) /
    # (5 x 512^2) = 3.8.
    wide = models.ModelSpec("random", "res_ln", 4, 61, 2, m=512)
    self.assertEqual(implementation.microbatches(128, 61, wide), 2)
    # Attention-only, it has the coefficient form (no m-wide state; its
    # widest state 2 x (61 + 4) = 130 <= m): the batch whole. With the
    # reference implementation, or at m = 64 < 130, the rule above.
    attn = dataclasses.replace(wide, variant="attn")
    self.assertEqual(implementation.microbatches(128, 61, attn), 1)
    self.assertEqual(
        implementation.microbatches(
            128, 61, dataclasses.replace(attn, impl="reference")
        ),
        2,
    )
    narrow_attn = dataclasses.replace(attn, m=64)
    # 128 x (61 x 64 + 2 x 61^2) / (5 x 64^2) = 72.9: 64 parts.
    self.assertEqual(implementation.microbatches(128, 61, narrow_attn), 64)
    # A narrow random UT whose attention dominates runs one string a part
    # (Zhong & Andreas's size: m = 16, 4 heads, T = 61).
    narrow = models.ModelSpec(
        "random", "res_ln_mlp", 4, 61, 2, num_heads=4, m=16, mlp_ratio=4
    )
    self.assertEqual(implementation.microbatches(1000, 61, narrow), 1000)
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      with self.assertRaisesRegex(ValueError, "width m"):
        host.microbatches(8, 8, kind="random", width=16, num_heads=2)
    # Always a divisor of the batch, and never more microbatches than strings.
    self.assertEqual(implementation.microbatches(30, 32, sparse_k4), 15)
    self.assertEqual(implementation.microbatches(2, 128, sparse_k4), 2)

  def test_whole_batch_off_cpu(self):
    sparse_k4 = models.ModelSpec(
        "sparse", "res_ln", 6, 32, 4, num_layers=5, width=32
    )
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      self.assertEqual(implementation.microbatches(32, 32, sparse_k4), 16)
    with mock.patch.object(jax, "default_backend", return_value="gpu"):
      self.assertEqual(implementation.microbatches(32, 32, sparse_k4), 1)

  @parameterized.named_parameters(("auto", "auto", None), ("two", "2", 2))
  def test_cpu_microbatches_reach_the_step(self, value, parts):
    config = train_helpers.smoke_config(
        arg="model=random"
    )  # Batch 8: 1 part by default.
    self.assertIsNone(
        implementation.configured_microbatches(config)
    )  # No cpu section.
    cpu_config.overlay(config).cpu.microbatches = value
    self.assertEqual(implementation.configured_microbatches(config), parts)
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    state, tx, _ = checkpoint.init_state(config, spec)
    step = step_lib.make_step(config, spec, tx)[0]
    with mock.patch.object(
        step_lib, "grad_sums", wraps=step_lib.grad_sums
    ) as sums:
      step(state, data_lib.train_batch(config, task, 0))
    self.assertEqual(
        [c.kwargs["microbatches"] for c in sums.call_args_list],
        [] if parts is None else [parts],
    )

  @parameterized.named_parameters(
      ("zero", "0", r"config.cpu.microbatches='0'; use auto or a positive"),
      ("word", "all", r"config.cpu.microbatches='all'; use auto"),
      ("negative", "-2", r"config.cpu.microbatches='-2'; use auto"),
      (
          "not_a_divisor",
          "3",
          r"config.cpu.microbatches=3 must divide the 8 strings of each step's "
          r"batch on a device \(config.train.batch_size=8\)",
      ),
  )
  def test_bad_cpu_microbatches_is_one_line_error(self, value, pattern):
    config = cpu_config.overlay(train_helpers.smoke_config())
    config.cpu.microbatches = value
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    cli_helpers.assert_user_error(
        self, pattern, train.train_and_evaluate, config, workdir
    )
    self.assertFalse(os.path.exists(workdir))


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


class HostSettingsTest(parameterized.TestCase):
  """launch.cli's CPU overlay (configs/cpu.py), malloc tuning and compilation
  cache, in this process; the backend's name is patched to stand for a CPU or
  an accelerator host."""

  def test_compiler_options_come_from_the_cpu_section_only(self):
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      no_ynn = dict(
          compiler_options=dict(xla_cpu_experimental_ynn_fusion_type="")
      )
      config = dyck_config.get_config("smoke")
      self.assertEqual(
          implementation.compiler_options(config), {}
      )  # No section.
      cpu_config.overlay(config)
      self.assertEqual(
          implementation.compiler_options(config), {}
      )  # XLA's defaults.
      config.cpu.ynn_fusions = False
      self.assertEqual(implementation.compiler_options(config), no_ynn)
    with mock.patch.object(jax, "default_backend", return_value="gpu"):
      self.assertEqual(implementation.compiler_options(config), {})


if __name__ == "__main__":
  absltest.main()
