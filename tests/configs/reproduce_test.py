"""configs/reproduce.py: its profiles, and every sweep step of the full one
plans its runs."""

import os

from absl.testing import absltest

from configs import reproduce as reproduce_config
from tests import cli_helpers
from tests import paths
from ut.experiments import sweep

ROOT = paths.ROOT


class ProfileTest(absltest.TestCase):

  def test_unknown_profile_is_a_user_error(self):
    cli_helpers.assert_user_error(
        self,
        r"unknown profile 'fast'; use full or " r"quick",
        reproduce_config.get_config,
        "fast",
    )
    self.assertEqual(reproduce_config.get_config("quick").profile, "quick")


class FullProfileTest(absltest.TestCase):

  def test_every_sweep_step_plans_its_runs(self):
    steps = reproduce_config.get_config("full").steps
    sweeps = [s for s in steps if s.module == "launch.sweep"]
    self.assertContainsSubset(
        ["width", "width/select", "width/lr"], [s.name for s in sweeps]
    )
    for step in sweeps:
      path, _, arg = step.config.partition(":")
      module = sweep.load_config_module(os.path.join(ROOT, path))
      self.assertNotEmpty(sweep.collect_runs(module, arg or None), step.name)


if __name__ == "__main__":
  absltest.main()
