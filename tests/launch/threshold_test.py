"""`python -m launch.threshold`: the table, its files, and a bad override."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
import pytest

from configs import threshold as threshold_config
from tests import cli_helpers
from tests import paths

ROOT = paths.ROOT


def run_threshold(workdir, *overrides):
  cmd = [
      sys.executable,
      "-m",
      "launch.threshold",
      "--config=configs/threshold.py:smoke",
      f"--workdir={workdir}",
      *overrides,
  ]
  return subprocess.run(
      cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )


@pytest.mark.slow
class CommandTest(absltest.TestCase):
  """The command end to end: its table, its files, and no overwriting."""

  def test_prints_the_table_writes_files_and_keeps_them(self):
    workdir = self.create_tempdir().full_path
    proc = run_threshold(workdir)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("N-1", proc.stdout)
    self.assertIn(f"wrote {workdir}/threshold.csv, .json and .png", proc.stdout)
    with open(os.path.join(workdir, "threshold.json")) as f:
      report = json.load(f)
    self.assertLen(
        report["summary"], len(threshold_config.get_config("smoke").grid)
    )
    self.assertTrue(os.path.exists(os.path.join(workdir, "threshold.png")))
    before = open(os.path.join(workdir, "threshold.json"), "rb").read()
    cli_helpers.assert_one_line_error(
        self, run_threshold(workdir), r"threshold.csv already exists.*overwrite"
    )
    self.assertEqual(
        open(os.path.join(workdir, "threshold.json"), "rb").read(), before
    )

  def test_bad_override_is_one_line_error(self):
    workdir = self.create_tempdir().full_path
    cli_helpers.assert_one_line_error(
        self,
        run_threshold(workdir, "--config.grid=(1, 2, 4)"),
        r"grid entry 1 must be",
    )
    self.assertEmpty(os.listdir(workdir))


if __name__ == "__main__":
  absltest.main()
