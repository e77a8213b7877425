"""Every colabs/*.ipynb runs headless at the smoke profile (STYLE 14).

Each notebook opens with the setup cell (`notebooks.SETUP_CELL`: installs `ut`
in Colab, moves to the repository root) and then the parameters cell, which
holds the `full` profile line; the test sets it to smoke and executes the
notebook with `ut.io.notebooks` (nbclient, a kernel of this interpreter, the
repository root as working directory). Smoke runs write only to temporary
folders: the test checks that results/ is unchanged. The setup cell's own
behaviour is tested in tests/io/notebooks_test.py.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import nbformat
import pytest

from ut.io import notebooks

ROOT = notebooks.ROOT
NOTEBOOKS = [notebooks.path(n) for n in notebooks.names()]
CELL_TIMEOUT_S = 300


def _results_snapshot():
  """{path: (size, mtime)} of every file under results/."""
  out = {}
  for folder, _, files in os.walk(os.path.join(ROOT, "results")):
    for name in files:
      path = os.path.join(folder, name)
      st = os.stat(path)
      out[path] = (st.st_size, st.st_mtime_ns)
  return out


class NotebooksTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.kernel_specs = cls.enterClassContext(notebooks.kernel_specs())

  def test_notebooks_found(self):
    self.assertNotEmpty(NOTEBOOKS)

  @parameterized.named_parameters(
      (os.path.splitext(os.path.basename(p))[0], p) for p in NOTEBOOKS
  )
  @pytest.mark.slow  # Under named_parameters: each generated test keeps it.
  def test_runs_at_smoke_profile(self, path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    self.assertLen(code[:2], 2, "no setup and parameters cells")
    self.assertEqual(
        code[0].source,
        notebooks.SETUP_CELL,
        "the first code cell must be the setup cell",
    )
    self.assertIn(
        notebooks.profile_line("full"),
        code[1].source.splitlines(),
        "the second code cell must be the parameters cell",
    )
    self.assertTrue(any("#@title" in c.source for c in code), "no #@title")
    self.assertTrue(any("#@param" in c.source for c in code), "no #@param")
    for c in code:
      self.assertFalse(
          c.get("outputs") or c.get("execution_count"),
          "stored outputs: clear them before committing",
      )
    notebooks.set_profile(nb, "smoke")
    self.assertIn(notebooks.profile_line("smoke"), code[1].source)

    before = _results_snapshot()
    try:
      notebooks.execute(nb, self.kernel_specs, timeout_s=CELL_TIMEOUT_S)
    except notebooks.NotebookFailed as e:
      self.fail(
          f"{os.path.basename(path)} failed at smoke profile:\n{e.detail}"
      )
    self.assertEqual(
        before,
        _results_snapshot(),
        "a smoke run changed results/: write to a temporary folder",
    )


if __name__ == "__main__":
  absltest.main()
