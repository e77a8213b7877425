"""`python -m launch.dyck_baseline`: its counts match the strings themselves."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
import numpy as np
import pytest

from configs import dyck as dyck_config
from tests import cli_helpers
from tests import paths
from ut.training import data as data_lib
from ut.training.tasks import dyck

ROOT = paths.ROOT


@pytest.mark.slow
class DyckBaselineTest(absltest.TestCase):
  """launch.dyck_baseline, run as a command."""

  def run_baseline(self, workdir, *flags):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.dyck_baseline",
            f"--workdir={workdir}",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

  def test_counts_match_the_strings_themselves(self):
    workdir = self.create_tempdir().full_path
    proc = self.run_baseline(workdir, "--seeds=1", "--steps=200")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(workdir, "counting_baseline.json")) as f:
      mixes = json.load(f)["mixes"]
    self.assertEqual(list(mixes), list(dyck.MIXES))
    for mix, report in mixes.items():
      # From the strings themselves (the command compares token rows).
      config = dyck_config.get_config(f"mix={mix},seed=0")
      task = data_lib.make_task(config)
      trained = {
          t
          for step in range(config.train.steps)
          for t in dyck.decode(
              data_lib.train_batch(config, task, step)["tokens"]
          )
      }
      self.assertEqual(
          report["seen_in_training"], {"0": {"valid": 0, "test": 0}}
      )
      for split in ("valid", "test"):
        batch = task.held_out(split)
        held_out, labels = dyck.decode(batch["tokens"]), batch["labels"][:, -1]
        self.assertFalse(trained & set(held_out))
        self.assertAlmostEqual(report[split]["balanced"], labels.mean())
        counts = np.array([t.count("(") == t.count(")") for t in held_out])
        self.assertAlmostEqual(
            report[split]["counting"]["accuracy"], np.mean(counts == labels)
        )

  def test_no_seeds_is_one_line_error(self):
    workdir = os.path.join(self.create_tempdir().full_path, "out")
    cli_helpers.assert_one_line_error(
        self,
        self.run_baseline(workdir, "--seeds=0"),
        r"--seeds=0; use 1 or more",
    )
    self.assertFalse(os.path.exists(workdir))


if __name__ == "__main__":
  absltest.main()
