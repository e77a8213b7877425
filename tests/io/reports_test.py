"""Result files: atomic writes, output-path checks, the commit in provenance."""

import json
import os
import subprocess

from absl.testing import absltest
import pytest

from ut.errors import UserError
from ut.io import reports


class WriteTest(absltest.TestCase):

  def test_a_failed_write_leaves_nothing(self):
    tmp = self.create_tempdir().full_path
    path = os.path.join(tmp, "table.csv")
    with self.assertRaises(IndexError):  # No rows: no header to write.
      reports.write_csv(path, [])
    self.assertEqual(os.listdir(tmp), [])
    reports.write_text(path, "kept\n")
    loop = {}
    loop["self"] = loop
    with self.assertRaisesRegex(ValueError, "Circular"):  # Fails mid-write.
      reports.write_json(path, loop)
    with open(path) as f:
      self.assertEqual(f.read(), "kept\n")
    self.assertEqual(os.listdir(tmp), ["table.csv"])

  def test_markdown_blocks_are_separated_and_empty_ones_dropped(self):
    path = os.path.join(self.create_tempdir().full_path, "t.md")
    reports.write_markdown(path, "| a |", "", "Training: 1 core-hour.")
    with open(path) as f:
      self.assertEqual(f.read(), "| a |\n\nTraining: 1 core-hour.\n")
    reports.write_markdown(path, "| a |", "")
    with open(path) as f:
      self.assertEqual(f.read(), "| a |\n")


class CellTest(absltest.TestCase):

  def test_mean_std_in_percent_std_only_where_defined(self):
    self.assertEqual(reports.mean_std(0.98654, 0.01681), "98.65 ± 1.68")
    self.assertEqual(reports.mean_std(0.9805, float("nan")), "98.05")
    self.assertEqual(reports.mean_std(0.9805, None), "98.05")
    self.assertEqual(reports.mean_std(float("nan"), float("nan")), "")
    self.assertEqual(reports.mean_std(None, None), "")


@pytest.mark.slow  # Starts git.
class GitCommitTest(absltest.TestCase):

  def test_regenerated_results_are_not_dirty_code_is(self):
    repo = self.create_tempdir().full_path
    git = lambda *a: subprocess.run(
        ["git", *a], cwd=repo, check=True, capture_output=True
    )
    git("init", "-q")
    os.makedirs(os.path.join(repo, "results", "t"))
    os.makedirs(os.path.join(repo, "ut"))
    for name in ("results/t/table.json", "ut/code.py"):
      with open(os.path.join(repo, name), "w") as f:
        f.write("1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = git("rev-parse", "HEAD").stdout.decode().strip()
    here = os.path.join(repo, "ut")
    self.assertEqual(reports.git_commit(here), head)
    with open(os.path.join(repo, "results/t/table.json"), "w") as f:
      f.write("2\n")
    self.assertEqual(reports.git_commit(here), head)
    with open(os.path.join(repo, "ut/code.py"), "w") as f:
      f.write("2\n")
    self.assertEqual(reports.git_commit(here), head + "+dirty")


class CheckOutputTest(absltest.TestCase):

  def test_new_file_passes_existing_needs_overwrite(self):
    tmp = self.create_tempdir().full_path
    path = os.path.join(tmp, "sub", "r.json")
    reports.check_output(path, False, "--overwrite")  # New, under a new folder.
    reports.write_text(path, "x")
    with self.assertRaisesRegex(
        UserError, r"r.json already exists; pass --overwrite"
    ):
      reports.check_output(path, False, "--overwrite")
    reports.check_output(path, True, "--overwrite")


class OutputFinishedTest(absltest.TestCase):

  def test_a_report_with_pending_rows_is_not_finished(self):
    folder = self.create_tempdir().full_path
    path = lambda name: os.path.join(folder, name)
    self.assertFalse(reports.output_finished(path("none.json")))
    for name, content, want in (
        ("figure.png", "", True),
        ("done.json", {"rows": [1]}, True),
        ("complete.json", {"pending": None}, True),
        ("partial.json", {"pending": ["random scratch"]}, False),
    ):
      with open(path(name), "w") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
      self.assertEqual(reports.output_finished(path(name)), want, name)


if __name__ == "__main__":
  absltest.main()
