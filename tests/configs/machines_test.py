"""configs/machines.py: draws crossed with programs."""

import os

from absl.testing import absltest

from tests import paths
from ut.experiments import sweep

ROOT = paths.ROOT


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


class MachinesTest(absltest.TestCase):

  def test_crosses_draws_with_programs(self):
    runs = sweep.collect_runs(_module("machines.py"))
    pairs = [(c.task, c.model.ut_seed, c.seed) for _, c in runs]
    self.assertLen(set(pairs), 12)
    self.assertEqual(
        {(u, s) for _, u, s in pairs},
        {(u, s) for u in (0, 1, 2) for s in (10, 11)},
    )
    # One cell per task: the draws and programs are its seeds.
    self.assertLen({sweep.group_key(c) for _, c in runs}, 2)


if __name__ == "__main__":
  absltest.main()
