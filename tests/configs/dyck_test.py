"""configs/dyck.py: Zhong & Andreas's protocol, and GPT-2's."""

from absl.testing import absltest

from configs import dyck as dyck_config
from configs import dyck_table
from ut.errors import UserError


class ProtocolTest(absltest.TestCase):

  def test_config_defaults_are_the_protocol(self):
    config = dyck_config.get_config()
    self.assertEqual((config.data.mix, config.data.max_len), ("za", 60))
    self.assertEqual(
        (config.data.test_num, config.data.valid_num), (4000, 4000)
    )
    self.assertEqual(config.eval.num, config.data.valid_num)
    smoke = dyck_config.get_config("smoke")
    self.assertLessEqual(smoke.data.test_num + smoke.data.valid_num, 64)
    self.assertEqual(
        dyck_config.get_config("smoke,max_len=60").data.max_len, 60
    )
    added = []
    dyck_table.sweep(lambda arg, **kw: added.append(arg), "smoke")
    self.assertNotEmpty(added)
    for arg in added:  # The table's runs are this protocol too.
      self.assertGreater(dyck_table.get_config(arg).data.test_num, 0)


class ConfigTest(absltest.TestCase):

  def test_their_protocol_in_the_dyck_config(self):
    config = dyck_config.get_config(
        "model=gpt2_random,optimizer=za,mix=za_exact"
    )
    self.assertEqual(
        (config.model.kind, config.model.variant, config.data.mix),
        ("gpt2_random", "res_ln_mlp", "za_exact"),
    )
    tc = config.train
    self.assertEqual(
        (tc.steps, tc.batch_size, tc.lr, tc.warmup_steps, tc.schedule),
        (10000, 1000, 1e-3, 500, "cosine"),
    )
    self.assertEqual(
        (tc.final_lr_frac, tc.weight_decay, tc.decay_on, tc.adam_b2),
        (0.0, 1e-3, "weights", 0.999),
    )
    self.assertEqual((tc.stop_accuracy, tc.plateau_evals), (0.0, 0))
    short = dyck_config.get_config("model=gpt2_random,optimizer=za,steps=2000")
    self.assertEqual(short.train.steps, 2000)
    with self.assertRaisesRegex(UserError, "optimizer='adam'; use ours or za"):
      dyck_config.get_config("optimizer=adam")


if __name__ == "__main__":
  absltest.main()
