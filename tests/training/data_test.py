"""ut.training.data: make_task refuses settings that cannot work; Dyck's
held-out sets and the training stream that never draws them."""

from absl.testing import absltest
from absl.testing import parameterized

from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.errors import UserError
from ut.training import data as data_lib


class MakeTaskTest(parameterized.TestCase):

  @parameterized.parameters(
      (dyck_config, "max_len=1", r"max_len=1 is too short"),
      (khop_config, "k=0", r"k=0 is too small"),
      (khop_config, "alphabet=1", r"alphabet=1 is out of range"),
      (khop_config, "length=1", r"length=1 is too short"),
  )
  def test_settings_that_cannot_work_are_user_errors(
      self, module, arg, pattern
  ):
    # A UserError (one line from the CLIs), raised before a workdir is made.
    for smoke in ("", ",smoke"):  # smoke keeps an explicit length.
      config = module.get_config(arg + smoke)
      with self.assertRaisesRegex(
          UserError, r"config.data of task \w+: " + pattern
      ):
        data_lib.make_task(config)


if __name__ == "__main__":
  absltest.main()
