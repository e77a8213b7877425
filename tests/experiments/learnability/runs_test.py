"""ut.experiments.learnability.runs: the noisy programs and the UT runs' config."""

from absl.testing import absltest
import numpy as np

from configs import khop as khop_config
from configs import learnability as learnability_config
from ut.experiments import learnability
from ut.training import data as data_lib
from ut.training import models


def _spec(config):
  return models.model_spec(config, data_lib.make_task(config).info)


class NoisyProgramTest(absltest.TestCase):

  def test_relative_size_per_table_and_u_unchanged(self):
    rng = np.random.default_rng(0)
    program = {
        "embed": {
            "token": rng.standard_normal((50, 400)) * 3.0,
            "position": rng.standard_normal((60, 400)) * 0.01,
        },
        "unembed": rng.standard_normal((400, 5)),
    }
    for s in (0.0, 0.1, 3.0):
      out = learnability.noisy_program(program, s, seed=1)
      for name in ("token", "position"):
        e = program["embed"][name]
        diff = out[f"embed/{name}"] - e
        ratio = np.linalg.norm(diff) / np.linalg.norm(e)
        self.assertAlmostEqual(ratio, s, delta=0.02 * s + 1e-6)
      np.testing.assert_array_equal(
          out["unembed"], program["unembed"].astype(np.float32)
      )
    a = learnability.noisy_program(program, 0.3, seed=1)
    b = learnability.noisy_program(program, 0.3, seed=2)
    self.assertFalse(np.array_equal(a["embed/token"], b["embed/token"]))

  def test_ut_runs_follow_the_khop_protocol_not_the_targets(self):
    config = learnability_config.get_config()
    protocol = khop_config.get_config("model=sparse,variant=attn,k=2")
    self.assertEqual(config.target.train.schedule, "cosine")
    ut_spec = _spec(protocol)
    c = learnability.ut_config(config, ut_spec, "sparse", seed=2)
    for field in ("schedule", "steps", "stop_accuracy", "stop_evals"):
      self.assertEqual(c.train[field], protocol.train[field], field)
    self.assertEqual(c.train.lr, 1e-2)
    self.assertEqual((c.seed, c.model.kind), (2, "sparse"))
    self.assertEqual(c.data.to_dict(), config.target.data.to_dict())


if __name__ == "__main__":
  absltest.main()
