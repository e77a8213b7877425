"""config.precision: validated, applied to every step, and on CPU bit-identical
to JAX's unset default (so runs recorded before the field ran at "highest")."""

import json
import os

from absl.testing import absltest
import jax

from configs import khop
from ut.errors import UserError
from ut.training import precision
from ut.training import train


def _smoke(**fields):
  config = khop.get_config("model=random,variant=res_ln,k=1,smoke")
  for key, value in fields.items():
    config[key] = value
  return config


class PrecisionTest(absltest.TestCase):

  def test_bad_value_is_a_one_line_user_error(self):
    with self.assertRaisesRegex(UserError, "precision='tf32'; use one of"):
      precision.of(_smoke(precision="tf32"))

  def test_scope_sets_jax_default_matmul_precision(self):
    with precision.scope(_smoke(precision="tensorfloat32")):
      self.assertEqual(jax.config.jax_default_matmul_precision, "tensorfloat32")
    with precision.exact():
      self.assertEqual(jax.config.jax_default_matmul_precision, "highest")

  def test_highest_is_bit_identical_to_unset_on_cpu(self):
    """A smoke run at "highest" and one at "default" (no precision) end with
    the same parameters and metrics, bit for bit, on CPU."""
    if jax.default_backend() != "cpu":
      self.skipTest("full float32 is JAX's default on CPU only")
    out = {}
    for value in ("highest", "default"):
      workdir = self.create_tempdir().full_path
      train.train_and_evaluate(_smoke(precision=value), workdir)
      with open(os.path.join(workdir, "metrics.json")) as f:
        metrics = json.load(f)
      out[value] = (
          metrics["param_checksum"],
          metrics["eval_loss"],
          metrics["final_train_loss"],
      )
      with open(os.path.join(workdir, "config.json")) as f:
        self.assertEqual(json.load(f)["precision"], value)
    self.assertEqual(out["highest"], out["default"])


if __name__ == "__main__":
  absltest.main()
