"""configs/dyck.py: Zhong & Andreas's protocol, and GPT-2's."""

from absl.testing import absltest

from configs import dyck as dyck_config
from configs import dyck_table


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


if __name__ == "__main__":
  absltest.main()
