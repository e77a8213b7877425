"""configs/khop.py: the batch and warmup arguments."""

from absl.testing import absltest

from configs import khop
from ut.errors import UserError


class SweepTest(absltest.TestCase):

  def test_khop_config_batch_and_warmup(self):
    config = khop.get_config("model=trained,batch=64,warmup=0")
    self.assertEqual(
        (config.train.batch_size, config.train.warmup_steps), (64, 0)
    )
    self.assertEqual((config.train.steps, config.eval.every), (10000, 250))
    with self.assertRaisesRegex(UserError, r"batch=0, warmup=100; use batch"):
      khop.get_config("batch=0")


if __name__ == "__main__":
  absltest.main()
