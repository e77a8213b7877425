"""configs/dyck_za.py: the sweep runs GPT-2's protocol for both models."""

import os

from absl.testing import absltest

from ut.experiments import sweep


class ConfigTest(absltest.TestCase):

  def test_the_sweep_runs_their_protocol_for_both_models(self):
    module = sweep.load_config_module(
        os.path.join(
            os.path.dirname(__file__), "..", "..", "configs", "dyck_za.py"
        )
    )
    runs = [c for _, c in sweep.collect_runs(module, None)]
    got = sorted((c.model.kind, c.train.steps, c.seed) for c in runs)
    self.assertEqual(
        got,
        [("gpt2", 10000, s) for s in (0, 1, 2)]
        + [("gpt2_random", 2000, 0)]
        + [("gpt2_random", 10000, s) for s in (0, 1, 2)],
    )
    for c in runs:
      self.assertEqual(c.data.mix, "za_exact")
      self.assertEqual(
          (c.train.batch_size, c.train.adam_b2, c.train.decay_on),
          (1000, 0.999, "weights"),
      )
      self.assertEqual(c.model.ut_seed, c.seed)  # Each seed a new machine.


if __name__ == "__main__":
  absltest.main()
