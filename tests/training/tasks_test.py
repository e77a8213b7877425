"""ut.training.tasks: the registry of task generators."""

from absl.testing import absltest

from ut.training.tasks import dyck
from ut.training.tasks import GENERATORS
from ut.training.tasks import khop


class RegistryTest(absltest.TestCase):

  def test_tasks_registry(self):
    self.assertIs(GENERATORS["dyck"], dyck)
    self.assertIs(GENERATORS["khop"], khop)


if __name__ == "__main__":
  absltest.main()
