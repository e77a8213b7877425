"""Every colabs/*.ipynb runs headless at the smoke profile (STYLE 14), and ut/plots.

Each notebook's first code cell holds the line PROFILE_LINE; the test swaps it
for SMOKE_LINE and executes the notebook with nbclient in a kernel of this
interpreter (a kernelspec in a temporary folder: no user-level install), with
the repository root as working directory. Smoke runs write only to temporary
folders: the test checks that results/ is unchanged.
"""

import glob
import json
import math
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpecManager
import nbclient
import nbformat

from ut import plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colabs", "*.ipynb")))
PROFILE_LINE = 'profile = "full"  #@param ["smoke", "full"]'
SMOKE_LINE = 'profile = "smoke"  #@param ["smoke", "full"]'
CELL_TIMEOUT_S = 300
KERNEL = "ut-colabs-test"


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
    cls.kernel_dir = tempfile.mkdtemp(prefix="ut_kernels_")
    kernel_dir = cls.kernel_dir
    os.makedirs(os.path.join(kernel_dir, KERNEL))
    with open(os.path.join(kernel_dir, KERNEL, "kernel.json"), "w") as f:
      json.dump(dict(argv=[sys.executable, "-m", "ipykernel_launcher", "-f",
                           "{connection_file}"], display_name="ut (test)",
                     language="python"), f)
    cls.kernel_specs = KernelSpecManager(kernel_dirs=[kernel_dir])

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.kernel_dir)
    super().tearDownClass()

  def test_notebooks_found(self):
    self.assertNotEmpty(NOTEBOOKS)

  @parameterized.named_parameters(
      (os.path.splitext(os.path.basename(p))[0], p) for p in NOTEBOOKS)
  def test_runs_at_smoke_profile(self, path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    self.assertTrue(code, "no code cells")
    first = code[0].source.splitlines()
    self.assertIn(PROFILE_LINE, first,
                  "the first code cell must be the parameters cell with exactly "
                  f"the line {PROFILE_LINE!r}")
    self.assertTrue(any("#@title" in c.source for c in code), "no #@title")
    self.assertTrue(any("#@param" in c.source for c in code), "no #@param")
    for c in code:
      self.assertFalse(c.get("outputs") or c.get("execution_count"),
                       "stored outputs: clear them before committing")
    code[0].source = code[0].source.replace(PROFILE_LINE, SMOKE_LINE)

    before = _results_snapshot()
    km = AsyncKernelManager(kernel_name=KERNEL,
                            kernel_spec_manager=self.kernel_specs)
    client = nbclient.NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": ROOT}})
    try:
      client.execute()
    except nbclient.exceptions.CellExecutionError as e:
      self.fail(f"{os.path.basename(path)} failed at smoke profile:\n{e}")
    self.assertEqual(before, _results_snapshot(),
                     "a smoke run changed results/: write to a temporary folder")


ROWS = [
    dict(task="khop", kind=kind, variant=variant, data=json.dumps(dict(k=k)),
         lr=0.01, seeds=2, accuracy_mean=acc, accuracy_std=std, runs=f"{kind}{k}")
    for kind, variant, k, acc, std in [
        ("sparse", "res_ln", 1, 1.0, 0.0), ("random", "res_ln", 1, 0.9, 0.05),
        ("sparse", "attn", 2, 0.35, math.nan),
        ("compiled_sparse", "attn", 2, 0.99, 0.01)]]
PAPER = {("random", "res_ln"): "85.7-96.1", (2, "sparse", "attn"): "about 30-40",
         ("sparse", "res_ln"): "100"}


class PlotsTest(absltest.TestCase):

  def test_paper_range(self):
    self.assertEqual(plots.paper_range("85.7-96.1"), (85.7, 96.1))
    self.assertEqual(plots.paper_range("about 99"), (99.0, 99.0))
    self.assertIsNone(plots.paper_range("about the same"))

  def test_beside_paper(self):
    lines = plots.beside_paper(ROWS, PAPER, panel="k").splitlines()
    self.assertLen(lines, 2 + len(ROWS))
    self.assertRegex(lines[3], r"90\.00 ± 5\.00 \|\s+85\.7-96\.1 \|")
    self.assertRegex(lines[4], r"35\.00 \|\s+about 30-40 \|")  # No std: 1 seed.

  def test_accuracy_bars(self):
    fig = plots.accuracy_bars(ROWS, "k", PAPER, title="k-hop")
    self.assertEqual([ax.get_title() for ax in fig.axes], ["k = 1", "k = 2"])
    bars = [p.get_height() for ax in fig.axes for p in ax.patches]
    self.assertSequenceAlmostEqual(sorted(bars), [35, 90, 99, 100])
    fig.savefig(os.path.join(self.create_tempdir().full_path, "k.png"))

  def test_compiled_bars(self):
    result = dict(rows=[dict(construction=c, m=m, target_accuracy=0.9,
                             ut_accuracy=0.9, agreement=1.0)
                        for c, m in (("sparse", 416), ("random", 640))])
    fig = plots.compiled_bars({"dyck": result})
    self.assertLen(fig.axes[0].patches, 6)

  def test_finished_rows(self):
    workdir = self.create_tempdir().full_path
    config = os.path.join(ROOT, "configs/dyck_table.py") + \
        ":smoke,kinds=sparse,variants=attn,mixes=za,seeds=2"
    self.assertIsNone(plots.finished_rows(config, workdir))
    runs = "model=sparse_variant=attn_mix=za_seed={}_smoke"
    row = dict(ROWS[0], runs=";".join(runs.format(s) for s in range(2)))
    other = dict(ROWS[1], runs="not_in_this_grid")
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[row, other]), f)
    self.assertEqual(plots.finished_rows(config, workdir), [row])
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[dict(row, runs=runs.format(0))]), f)
    self.assertIsNone(plots.finished_rows(config, workdir))  # Seed 1 missing.


if __name__ == "__main__":
  absltest.main()
