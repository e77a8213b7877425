"""ut.experiments.sweep.runs: claims, run costs, and an adaptive sweep's
second pass, in this process."""

import json
import os
from unittest import mock

from absl.testing import absltest

from tests import paths
from tests import sweep_config
from ut.experiments import sweep
from ut.experiments.sweep import runs as sweep_runs

ROOT = paths.ROOT


class SweepTest(absltest.TestCase):

  def test_claim_is_given_once_per_set_of_workers(self):
    tmp = self.create_tempdir().full_path
    first, second = sweep.claims_folder(tmp), sweep.claims_folder(tmp)
    self.assertNotEqual(first, second)
    self.assertTrue(sweep.claim(first, "run_a"))
    self.assertFalse(sweep.claim(first, "run_a"))
    self.assertTrue(sweep.claim(first, "run_b"))
    self.assertTrue(sweep.claim(second, "run_a"))  # A later set starts afresh.

  def test_cost_proxy_orders_by_size(self):
    configs = dict(sweep.collect_runs(sweep_config, "kinds"))
    cost = {
        name.split("_")[0]: sweep.run_cost(c) for name, c in configs.items()
    }
    self.assertGreater(cost["model=sparse"], cost["model=random"])
    self.assertGreater(cost["model=random"], cost["model=trained"])

  def test_adaptive_sweep_adds_runs_in_a_second_pass(self):
    tmp = self.create_tempdir().full_path
    # In process: keep JAX's cache setting off this temporary folder.
    with mock.patch.object(sweep_runs, "use_compilation_cache"):
      sweep.run_sweep(
          os.path.join(ROOT, "tests", "sweep_config.py:adaptive"), tmp
      )
    runs = os.path.join(tmp, "runs")
    with open(
        os.path.join(runs, "model=random_smoke_seed=0", "metrics.json")
    ) as f:
      first = json.load(f)
    lr = round(first["eval_accuracy"] / 100, 6)
    third = os.path.join(
        runs, f"model=random_smoke_seed=2_train.lr={lr}", "metrics.json"
    )
    self.assertTrue(os.path.exists(third), os.listdir(runs))
    with open(third) as f:
      self.assertEqual(json.load(f)["lr"], lr)
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual(sum(r["seeds"] for r in table["rows"]), 3)
    self.assertEqual(table["missing_runs"], [])


if __name__ == "__main__":
  absltest.main()
