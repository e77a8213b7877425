"""`python -m launch.colabs`: its user errors (executing at full size is the
regeneration)."""

import os
import subprocess
import sys

from absl.testing import absltest
import pytest

from tests import cli_helpers
from ut.io import notebooks

ROOT = notebooks.ROOT


@pytest.mark.slow
class LaunchColabsTest(absltest.TestCase):
  """launch.colabs' user errors (executing at full size is the regeneration)."""

  def run_cli(self, *flags):
    return subprocess.run(
        [sys.executable, "-m", "launch.colabs", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

  def test_unknown_notebook(self):
    proc = self.run_cli(
        "--notebooks=dyck,nope", f"--out={self.create_tempdir().full_path}"
    )
    cli_helpers.assert_one_line_error(
        self, proc, r"no notebook colabs/nope.ipynb"
    )

  def test_refuses_to_overwrite(self):
    out = self.create_tempdir()
    out.create_file("khop.ipynb", content="keep")
    proc = self.run_cli("--notebooks=khop", f"--out={out.full_path}")
    cli_helpers.assert_one_line_error(self, proc, r"khop.ipynb already exists")
    with open(os.path.join(out.full_path, "khop.ipynb")) as f:
      self.assertEqual(f.read(), "keep")


if __name__ == "__main__":
  absltest.main()
