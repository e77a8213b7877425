"""Every colabs/*.ipynb runs headless at the smoke profile (STYLE 14), and ut/plots.

Each notebook opens with the setup cell (`notebooks.SETUP_CELL`: installs `ut`
in Colab, moves to the repository root) and then the parameters cell, which
holds the `full` profile line; the test sets it to smoke and executes the
notebook with `ut.io.notebooks` (nbclient, a kernel of this interpreter, the
repository root as working directory). Smoke runs write only to temporary
folders: the test checks that results/ is unchanged. The setup cell's own
behaviour (from colabs/, from outside a checkout) is tested in-process.
"""

import contextlib
import json
import math
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import nbformat
import numpy as np
import pytest

from tests import cli_helpers
from ut.errors import UserError
from ut.experiments import sweep
from ut.io import notebooks
from ut.io import plots
from ut.io import reports

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


ROWS = [
    dict(
        task="khop",
        kind=kind,
        variant=variant,
        data=json.dumps(dict(k=k)),
        lr=0.01,
        seeds=2,
        accuracy_mean=acc,
        accuracy_std=std,
        runs=f"{kind}{k}",
    )
    for kind, variant, k, acc, std in [
        ("sparse", "res_ln", 1, 1.0, 0.0),
        ("random", "res_ln", 1, 0.9, 0.05),
        ("sparse", "attn", 2, 0.35, math.nan),
        ("compiled_sparse", "attn", 2, 0.99, 0.01),
    ]
]
PAPER = {
    ("random", "res_ln"): "85.7-96.1",
    (2, "sparse", "attn"): "about 30-40",
    ("sparse", "res_ln"): "100",
}


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
    self.assertIn("validation", lines[3])
    # Where the runs have a test accuracy, that is the one reported.
    dyck_row = dict(
        ROWS[0],
        data=json.dumps(dict(mix="za")),
        width=416,
        test_mean=0.9339,
        test_std=0.0127,
        successes=0,
    )
    [line] = plots.beside_paper(
        [dyck_row], {("za", "sparse", "res_ln"): "100"}, panel="mix"
    ).splitlines()[2:]
    self.assertRegex(
        line, r"\| 416 \|\s+2 \|\s+test \| 93\.39 ± 1\.27 \|\s+100 \|\s+0/2 \|"
    )
    # Trained rows say when their seeds reached 99% and where they stopped.
    trained = [
        dict(
            dyck_row,
            successes=1,
            median_steps_to_99=3500.0,
            max_steps=20000,
            cap=20000,
        ),
        dict(dyck_row, max_steps=100000, cap=100000),
    ]
    lines = plots.beside_paper(trained, {}, panel="mix").splitlines()
    self.assertRegex(lines[0], r"median step to 99% \| last step / cap \|$")
    self.assertRegex(lines[2], r"\|\s+1/2 \|\s+3500 \|\s+20000 / 20000 \|$")
    self.assertRegex(lines[3], r"\|\s+0/2 \|\s+\|\s+100000 / 100000 \|$")
    # Runs that scored the test set at each evaluation (--test_each): their
    # test accuracy at the best validation beside the one at the end.
    best = [dict(dyck_row, test_best_mean=0.975, test_best_std=0.01), dyck_row]
    lines = plots.beside_paper(best, {}, panel="mix").splitlines()
    self.assertRegex(lines[0], r"ours \| paper \| test at best valid \|")
    self.assertRegex(lines[2], r"93\.39 ± 1\.27 \|\s+\|\s+97\.50 ± 1\.00 \|")
    self.assertRegex(lines[3], r"93\.39 ± 1\.27 \|\s+\|\s+\|")

  def test_accuracy_bars(self):
    fig = plots.accuracy_bars(ROWS, "k", PAPER, title="k-hop")
    self.assertEqual([ax.get_title() for ax in fig.axes], ["k = 1", "k = 2"])
    bars = [p.get_height() for ax in fig.axes for p in ax.patches]
    self.assertSequenceAlmostEqual(sorted(bars), [35, 90, 99, 100])
    fig.savefig(os.path.join(self.create_tempdir().full_path, "k.png"))

  def test_accuracy_bars_keep_every_row_of_a_kind(self):
    # Two widths of the random UT and two caps of the trained model in one
    # panel: each row is a bar of its own, labelled by what tells it apart,
    # at its test accuracy where it has one.
    base = dict(ROWS[2], variant="attn", accuracy_std=0.0, test_std=0.0)
    rows = [
        dict(base, kind="random", width=256, cap=20000, test_mean=0.5),
        dict(base, kind="random", width=928, cap=20000, test_mean=0.6),
        dict(
            base,
            kind="random",
            variant="res_ln",
            width=256,
            cap=20000,
            test_mean=0.7,
        ),
        dict(base, kind="trained", width=64, cap=20000, test_mean=0.8),
        dict(base, kind="trained", width=64, cap=100000, test_mean=0.9),
    ]
    fig = plots.accuracy_bars(rows, "k")
    [ax] = fig.axes
    self.assertEqual(
        [t.get_text() for t in ax.get_xticklabels()],
        [
            "random\nm=256",
            "random\nm=928",
            "trained\n20000 steps",
            "trained\n100000 steps",
        ],
    )
    bars = sorted(
        (p.get_x() + p.get_width() / 2, p.get_height()) for p in ax.patches
    )
    self.assertSequenceAlmostEqual([h for _, h in bars], [50, 70, 60, 80, 90])
    # The res_ln bar stands beside the attn bar of the same width.
    self.assertLess(bars[1][0] - bars[0][0], 1)

  def test_against_width_shows_accuracy_from_chance(self):
    # Points within a tenth of a point of each other do not fill the panel:
    # the axis starts at 50% (or 2 points below the lowest mean - std).
    point = lambda ratio, mean, std: dict(
        cell="c",
        ratio=ratio,
        accuracy_mean=mean,
        accuracy_std=std,
        successes=1,
        seeds=3,
    )
    fig = plots.against_width(
        [point(0.5, 0.998, 0.001), point(1.0, 0.999, math.nan)]
    )
    self.assertEqual(fig.axes[0].get_ylim(), (50, 100.5))
    fig = plots.against_width([point(0.5, 0.30, 0.05), point(1.0, 0.9, 0.0)])
    self.assertAlmostEqual(fig.axes[0].get_ylim()[0], 23)

  def test_against_width_labels_points_with_fewer_seeds(self):
    point = lambda ratio, seeds: dict(
        cell="c",
        ratio=ratio,
        accuracy_mean=0.9,
        accuracy_std=0.01,
        successes=1,
        seeds=seeds,
    )
    fig = plots.against_width([point(1.0, 3), point(2.0, 2)])
    for ax in fig.axes:
      self.assertEqual([t.get_text() for t in ax.texts], ["2 of 3 seeds"])
      self.assertEqual(ax.texts[0].xy[0], 2.0)
    fig = plots.against_width([point(1.0, 3), point(2.0, 3)])
    self.assertEmpty(fig.axes[0].texts)

  def test_compiled_bars(self):
    result = dict(
        rows=[
            dict(
                construction=c,
                m=m,
                target_accuracy=0.9,
                ut_accuracy=0.9,
                agreement=1.0,
            )
            for c, m in (("sparse", 416), ("random", 640))
        ]
    )
    fig = plots.compiled_bars({"dyck": result})
    self.assertLen(fig.axes[0].patches, 6)

  def test_finished_rows(self):
    workdir = self.create_tempdir().full_path
    config = (
        os.path.join(ROOT, "configs/dyck_table.py")
        + ":smoke,kinds=sparse,variants=attn,mixes=za,seeds=2"
    )
    self.assertIsNone(sweep.finished_rows(config, workdir))
    runs = "model=sparse_variant=attn_mix=za_seed={}_smoke"
    row = dict(ROWS[0], runs=";".join(runs.format(s) for s in range(2)))
    other = dict(ROWS[1], runs="not_in_this_grid")
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[row, other]), f)
    self.assertEqual(sweep.finished_rows(config, workdir), [row])
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[dict(row, runs=runs.format(0))]), f)
    self.assertIsNone(sweep.finished_rows(config, workdir))  # Seed 1 missing.

  def test_finished_rows_of_fewer_seeds_than_the_table(self):
    # The table has 3 seeds per cell; a 2-seed sub-grid gets its own mean.
    workdir = self.create_tempdir().full_path
    grid = (
        os.path.join(ROOT, "configs/dyck_table.py")
        + ":smoke,kinds=sparse,variants=attn,mixes=za,seeds={}"
        + ",more_seeds=0"  # Seeds this far apart would get more runs.
    )
    module = sweep.load_config_module(grid)
    runs = sweep.collect_runs(module, grid.format(3).split(":", 1)[1])
    for (name, config), acc in zip(runs, (0.5, 0.7, 0.9)):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              name=name,
              eval_accuracy=acc,
              task="dyck",
              kind="sparse",
              variant="attn",
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    sweep.write_table(
        workdir, sweep.aggregate(workdir, [n for n, _ in runs]), {}
    )
    [row] = sweep.finished_rows(grid.format(2), workdir)
    self.assertEqual(row["seeds"], 2)
    self.assertAlmostEqual(row["accuracy_mean"], 0.6)
    self.assertAlmostEqual(row["accuracy_std"], np.std([0.5, 0.7], ddof=1))
    [row] = sweep.finished_rows(grid.format(3), workdir)
    self.assertAlmostEqual(row["accuracy_mean"], 0.7)


if __name__ == "__main__":
  absltest.main()
