"""Trained targets compiled into fixed UTs agree with the target, with no training."""

import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from configs import compiled_ut as compiled_config
from tests import reference
from tests import xla_settings
from ut.training import checkpoint
from ut.training import held_out
from ut.training import models
from ut.training import trained_to_ut as compiled


class CompiledUTTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = tempfile.mkdtemp(prefix="compiled_test_")
    config = compiled_config.get_config("task=dyck,smoke")
    config.target_config.train.steps = 30
    with xla_settings.fast_compile():  # Training the smoke target: compiles.
      cls.result = compiled.run(config, cls.workdir)
    cls.params, cls.spec, cls.config, cls.task, _ = checkpoint.restore_params(
        os.path.join(cls.workdir, "target")
    )

  @parameterized.parameters("sparse", "random")
  def test_logits_match_numpy_target(self, construction):
    ut_params, ut_spec, _ = compiled.compile_model(
        self.params, self.spec, construction
    )
    batch = held_out.eval_batches(self.config, self.task)[0]
    got = np.asarray(
        models.apply(
            ut_params,
            ut_spec,
            batch["tokens"],
            precision=jax.lax.Precision.HIGHEST,
        )
    )
    # Independent: the trained model as a numpy target on its embedded inputs.
    p = jax.tree.map(np.asarray, self.params)
    x = (
        p["embed"]["token"][batch["tokens"]]
        + p["embed"]["position"][None, : batch["tokens"].shape[1]]
    )
    want = reference.target_forward(
        dict(p["layers"], wu=p["unembed"]), x, causal=True, residual=False
    )
    scale = np.abs(want).max()
    self.assertLess(np.abs(got - want).max() / scale, 1e-4)

  def test_report_agreement(self):
    rows = {r["construction"]: r for r in self.result["rows"]}
    self.assertEqual(set(rows), {"sparse", "random"})
    for row in rows.values():
      self.assertGreaterEqual(row["agreement"], 0.999)
      self.assertAlmostEqual(
          row["ut_accuracy"], row["target_accuracy"], delta=1e-3
      )
    self.assertGreaterEqual(rows["random"]["m"], rows["random"]["N"])
    self.assertTrue(
        os.path.exists(os.path.join(self.workdir, "compiled_ut.json"))
    )

  def test_refuses_non_attention_target(self):
    spec = models.ModelSpec(
        kind="trained", variant="res_ln", vocab_size=4, max_len=5, num_classes=2
    )
    params = models.init(jax.random.PRNGKey(0), spec)
    with self.assertRaisesRegex(ValueError, "attention-only"):
      compiled.compile_model(params, spec, "sparse")


if __name__ == "__main__":
  absltest.main()
