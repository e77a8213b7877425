"""ut.training.optimizer: the learning-rate schedule."""

from absl.testing import absltest
from absl.testing import parameterized

from tests import train_helpers
from tests import xla_settings
from ut.training import optimizer


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  def test_constant_schedule_keeps_the_peak(self):
    tc = train_helpers.smoke_config(
        steps=100, warmup_steps=10, schedule="constant"
    ).train
    schedule = optimizer.lr_schedule(tc, 0.5)
    self.assertAlmostEqual(float(schedule(5)), 0.25)
    for step in (10, 50, 99, 1000):
      self.assertAlmostEqual(float(schedule(step)), 0.5)


if __name__ == "__main__":
  absltest.main()
