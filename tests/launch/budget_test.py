"""`python -m launch.budget`: the report, and the input it refuses."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from tests import budget_helpers
from tests import cli_helpers
from tests import paths

ROOT = paths.ROOT


class LauncherTest(parameterized.TestCase):

  def _launch(self, *flags):
    return subprocess.run(
        [sys.executable, "-m", "launch.budget", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

  @pytest.mark.slow
  def test_writes_the_report_and_refuses_bad_input(self):
    sweep = os.path.join(self.create_tempdir().full_path, "tiny")
    for seed in range(2):
      budget_helpers.write_run(sweep, seed, [0.3, 0.6, 0.995], steps=3)
    out = os.path.join(self.create_tempdir().full_path, "out")
    flags = [f"--sources={sweep}", f"--out={out}", "--budgets=10,30"]
    proc = self._launch("--task=khop", *flags)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertCountEqual(os.listdir(out), ["khop.md", "khop.json", "khop.png"])
    with open(os.path.join(out, "khop.json")) as f:
      report = json.load(f)
    self.assertEqual(report["sources"], [sweep])
    self.assertEqual(report["budgets"], [10, 30])
    self.assertIn("git_commit", report["provenance"])
    (row,) = report["rows"]
    self.assertEqual(row["cells"]["30"]["successes"], 2)
    with open(os.path.join(out, "khop.md")) as f:
      self.assertIn("about 30-40", f.read())
    errors = [
        (["--task=nope", *flags], "--task=nope; use one of khop, dyck"),
        (["--task=khop", *flags], "already exists; pass --overwrite"),
        (["--task=dyck", f"--sources={sweep}x", f"--out={out}"], "has no runs"),
    ]
    for argv, pattern in errors:
      cli_helpers.assert_one_line_error(self, self._launch(*argv), pattern)


if __name__ == "__main__":
  absltest.main()
