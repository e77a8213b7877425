"""ut.training.data: make_task refuses settings that cannot work; Dyck's
held-out sets and the training stream that never draws them."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import dyck_reference
from ut.errors import UserError
from ut.experiments import dyck_protocol
from ut.training import data as data_lib
from ut.training.tasks import dyck


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


class ProtocolTest(absltest.TestCase):

  def test_held_out_sets_do_not_depend_on_the_run_seed(self):
    tasks = [
        data_lib.make_task(dyck_config.get_config(f"seed={s}")) for s in (0, 1)
    ]
    for split, num in (("valid", 4000), ("test", 4000)):
      a, b = (t.held_out(split) for t in tasks)
      self.assertEqual(a["tokens"].shape, (num, 61))
      np.testing.assert_array_equal(a["tokens"], b["tokens"])
      np.testing.assert_array_equal(
          a["labels"][:, -1],
          [dyck_reference.ref_balanced(t) for t in dyck.decode(a["tokens"])],
      )
    valid, test = (tasks[0].held_out(s)["tokens"] for s in ("valid", "test"))
    self.assertFalse(np.array_equal(valid, test))  # Separate seeds.

  def test_training_stream_never_draws_a_held_out_string(self):
    config = dyck_config.get_config("seed=3")
    config.train.steps = 200
    task = data_lib.make_task(config)
    held = {
        split: set(dyck.decode(task.held_out(split)["tokens"]))
        for split in ("valid", "test")
    }
    trained = set()
    for step in range(config.train.steps):
      batch = data_lib.train_batch(config, task, step)
      trained |= set(dyck.decode(batch["tokens"]))
      np.testing.assert_array_equal(
          batch["labels"][:, -1],
          [
              dyck_reference.ref_balanced(t)
              for t in dyck.decode(batch["tokens"])
          ],
      )
    self.assertFalse(trained & (held["valid"] | held["test"]))
    # Without the exclusion such strings come up: the check can fail.
    free = set(dyck.generate(config.train.steps * 128, 60, "za", seed=0)[2])
    self.assertGreater(len(free & held["test"]), 100)
    self.assertEqual(
        dyck_protocol.seen_in_training(config, task),
        {"valid": 0.0, "test": 0.0},
    )
    # Deterministic: the same (seed, step), the same batch.
    np.testing.assert_array_equal(
        data_lib.train_batch(config, task, 7)["tokens"],
        data_lib.train_batch(config, task, 7)["tokens"],
    )

  def test_bad_held_out_settings_are_user_errors(self):
    for field, value in (("test_num", -1), ("valid_seed", -2)):
      config = dyck_config.get_config("smoke")
      config.data[field] = value
      with self.assertRaisesRegex(UserError, rf"config.data.{field}="):
        data_lib.make_task(config)
    config = dyck_config.get_config("smoke,max_len=2")
    config.data.test_num = 4000
    with self.assertRaisesRegex(UserError, r"held-out sets hold almost every"):
      data_lib.make_task(config)


if __name__ == "__main__":
  absltest.main()
