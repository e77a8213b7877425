"""ut.io.notebooks: the profile switch, a failing cell, and the setup cell
(run in this process: from colabs/, from outside a checkout)."""

import contextlib
import os
import sys

from absl.testing import absltest
from absl.testing import parameterized
import nbformat
import pytest

from ut.errors import UserError
from ut.io import notebooks

ROOT = notebooks.ROOT


class NotebooksTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.kernel_specs = cls.enterClassContext(notebooks.kernel_specs())

  @pytest.mark.slow
  def test_a_failing_cell_raises_notebook_failed(self):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("raise ValueError('boom in cell')")]
    )
    with self.assertRaisesRegex(notebooks.NotebookFailed, "boom in cell"):
      notebooks.execute(nb, self.kernel_specs, timeout_s=60)

  def test_set_profile_needs_the_setup_and_parameters_cells(self):
    setup = nbformat.v4.new_code_cell(notebooks.SETUP_CELL)
    params = nbformat.v4.new_code_cell(notebooks.profile_line("full"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with self.assertRaisesRegex(UserError, "setup cell"):
      notebooks.set_profile(nb, "smoke")
    nb = nbformat.v4.new_notebook(cells=[params, setup])
    with self.assertRaisesRegex(UserError, "setup cell"):
      notebooks.set_profile(nb, "smoke")
    nb = nbformat.v4.new_notebook(
        cells=[setup, nbformat.v4.new_code_cell("x = 1")]
    )
    with self.assertRaisesRegex(UserError, "parameters cell"):
      notebooks.set_profile(nb, "smoke")
    with self.assertRaisesRegex(UserError, "profile='tiny'"):
      notebooks.set_profile(nb, "tiny")
    nb = nbformat.v4.new_notebook(cells=[setup, params])
    notebooks.set_profile(nb, "smoke")
    self.assertEqual(nb.cells[1].source, notebooks.profile_line("smoke"))
    self.assertEqual(nb.cells[0].source, notebooks.SETUP_CELL)


class SetupCellTest(absltest.TestCase):
  """The setup cell, run in this process (ut is installed here: no pip)."""

  @contextlib.contextmanager
  def cwd(self, path):
    before, path_before = os.getcwd(), list(sys.path)
    os.chdir(path)
    try:
      yield
    finally:
      os.chdir(before)
      sys.path[:] = path_before

  def run_setup(self, **overrides):
    source = notebooks.SETUP_CELL
    for name, value in overrides.items():
      line = next(l for l in source.splitlines() if l.startswith(f"{name} = "))
      source = source.replace(line, f"{name} = {value!r}")
    namespace = {}
    exec(compile(source, "setup cell", "exec"), namespace)  # pylint: disable=exec-used
    return os.getcwd()

  def test_from_the_repository_root_stays_there(self):
    with self.cwd(ROOT):
      self.assertEqual(self.run_setup(), ROOT)

  def test_from_colabs_moves_to_the_repository_root(self):
    with self.cwd(os.path.join(ROOT, "colabs")):
      self.assertEqual(self.run_setup(), ROOT)
      self.assertEqual(sys.path[0], ROOT)  # configs/ imports from there.

  def test_outside_a_checkout_it_needs_the_repository_url(self):
    with self.cwd(self.create_tempdir().full_path):
      with self.assertRaisesRegex(ValueError, r"UT_REPO='<git URL.*set it to"):
        self.run_setup()

  @pytest.mark.slow  # Starts git.
  def test_outside_a_checkout_it_clones_the_repository(self):
    # A local clone stands in for Colab's: the cell clones UT_REPO into
    # ut_repo/ and works from there.
    if not os.path.isdir(os.path.join(ROOT, ".git")):
      self.skipTest("not a git checkout")
    tmp = self.create_tempdir().full_path
    with self.cwd(tmp):
      self.assertEqual(
          self.run_setup(UT_REPO=f"file://{ROOT}"), os.path.join(tmp, "ut_repo")
      )
    self.assertTrue(
        os.path.isfile(os.path.join(tmp, "ut_repo", "configs", "dyck.py"))
    )


if __name__ == "__main__":
  absltest.main()
