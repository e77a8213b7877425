"""Budget tables against synthetic run folders with known curves."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest

from tests import cli_helpers
from ut.experiments import budget

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUCCESS_STOP = "accuracy >= 0.995 at 2 evaluations in a row"
PLATEAU_STOP = (
    "plateau: best accuracy of the last 5 evaluations 0.9, before 0.9"
)


def write_run(sweep, seed, accs, *, batch=10, steps=None, stop=None, **model):
  """A run folder as launch.sweep writes it: evaluations at steps 1, 2, ...
  with accuracies `accs`; its step cap `steps` (default: its last step)."""
  model = {"kind": "sparse", "variant": "attn", **model, "ut_seed": seed}
  config = dict(
      seed=seed,
      task="khop",
      model=model,
      train=dict(batch_size=batch, steps=steps or len(accs), warmup_steps=1),
      data=dict(k=2),
      compiled="",
  )
  name = f"model={model['kind']},variant={model['variant']},seed={seed}"
  name += f",steps={config['train']['steps']}"
  metrics = dict(
      name=name,
      step=len(accs),
      stopped_early=stop,
      curve=[[i + 1, a] for i, a in enumerate(accs)],
      model_width=8,
      config=config,
  )
  folder = os.path.join(sweep, "runs", name)
  os.makedirs(folder)
  with open(os.path.join(folder, "metrics.json"), "w") as f:
    json.dump(metrics, f)


def runs_of(sweep):
  return {r["name"]: r for r in budget.read_runs(sweep)}


class ValueAtTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.sweep = self.create_tempdir().full_path
    write_run(self.sweep, 0, [0.3, 0.5, 0.7], steps=10)  # Still running.
    write_run(self.sweep, 1, [0.4, 0.996], steps=10, stop=SUCCESS_STOP)
    write_run(self.sweep, 2, [0.2, 0.6], steps=10, stop=PLATEAU_STOP)
    write_run(self.sweep, 3, [0.1, 0.8])  # Ended at its cap, 20 strings.
    self.runs = {r["config"]["seed"]: r for r in budget.read_runs(self.sweep)}

  @parameterized.parameters((10, 0.3), (19, 0.3), (20, 0.5), (29, 0.5))
  def test_last_evaluation_at_or_before_the_budget(self, strings, want):
    self.assertEqual(budget.value_at(self.runs[0], strings), (want, "reached"))

  def test_no_evaluation_before_the_first(self):
    self.assertEqual(budget.value_at(self.runs[0], 9), (None, "no eval"))

  @parameterized.parameters((1, "success", 0.996), (2, "plateau", 0.6))
  def test_an_early_stop_carries_its_last_value(self, seed, flag, want):
    self.assertEqual(budget.value_at(self.runs[seed], 1000), (want, flag))
    self.assertEqual(
        budget.value_at(self.runs[seed], 1000, carry=()), (None, flag)
    )

  def test_a_capped_run_counts_nothing_after_its_cap(self):
    self.assertEqual(budget.value_at(self.runs[3], 20), (0.8, "reached"))
    self.assertEqual(budget.value_at(self.runs[3], 21), (None, "capped"))

  def test_a_run_that_has_not_trained_that_far_counts_nothing(self):
    self.assertEqual(budget.value_at(self.runs[0], 31), (None, "capped"))


class CellTest(parameterized.TestCase):

  def test_mean_std_min_and_successes(self):
    sweep = self.create_tempdir().full_path
    finals = [0.98, 0.99, 0.999, 0.5]
    for seed, a in enumerate(finals):
      write_run(sweep, seed, [0.1, a], steps=5)
    c = budget.cell(budget.read_runs(sweep), 20)
    self.assertEqual((c["n"], c["seeds"]), (4, 4))
    self.assertAlmostEqual(c["mean"], np.mean(finals))
    self.assertAlmostEqual(c["std"], np.std(finals, ddof=1))
    self.assertEqual(c["min"], 0.5)
    self.assertEqual(c["successes"], 2)  # 0.99 and 0.999 are >= 0.99.
    self.assertEqual(budget.cell_text(c).split()[-1], "2/4")

  def test_missing_and_carried_seeds_are_counted_and_marked(self):
    sweep = self.create_tempdir().full_path
    write_run(sweep, 0, [0.5, 0.9, 0.95])
    write_run(sweep, 1, [0.4, 0.996], steps=3, stop=SUCCESS_STOP)
    write_run(sweep, 2, [0.2, 0.7], steps=2)  # Capped before 30 strings.
    c = budget.cell(budget.read_runs(sweep), 30)
    self.assertEqual((c["n"], c["seeds"]), (2, 3))
    self.assertEqual(c["flags"], {"success": 1, "capped": 1})
    self.assertAlmostEqual(c["mean"], (0.95 + 0.996) / 2)
    self.assertEndsWith(budget.cell_text(c), "1/2 of 3 (1†)")

  def test_an_empty_cell_says_why(self):
    sweep = self.create_tempdir().full_path
    for seed in range(3):
      write_run(sweep, seed, [0.2, 0.7])
    c = budget.cell(budget.read_runs(sweep), 1000)
    self.assertEqual(c["n"], 0)
    self.assertEqual(budget.cell_text(c), "— (3 ended at the cap)")

  def test_rows_are_seeds_of_one_config_and_one_cap(self):
    sweep = self.create_tempdir().full_path
    for seed in range(3):
      write_run(sweep, seed, [0.2, 0.7])
      write_run(sweep, seed, [0.2, 0.7, 0.9], steps=5)
    write_run(sweep, 0, [0.3, 0.8], variant="res_ln")
    rows = budget.group_rows(budget.read_runs(sweep), "k")
    got = [(r["variant"], r["cap"], len(r["runs"])) for r in rows]
    self.assertEqual(got, [("attn", 20, 3), ("attn", 50, 3), ("res_ln", 20, 1)])
    self.assertEqual({r["panel"] for r in rows}, {2})

  def test_compiled_runs_and_folders_without_runs(self):
    sweep = self.create_tempdir().full_path
    cli_helpers.assert_user_error(self, "has no runs", budget.read_runs, sweep)
    write_run(sweep, 0, [0.5])
    path = os.path.join(sweep, "runs", os.listdir(f"{sweep}/runs")[0])
    with open(f"{path}/metrics.json") as f:
      m = json.load(f)
    m["config"]["compiled"] = "sparse"
    with open(f"{path}/metrics.json", "w") as f:
      json.dump(m, f)
    cli_helpers.assert_user_error(
        self, "no trained run", budget.read_runs, sweep
    )


class VerdictTest(parameterized.TestCase):

  @parameterized.parameters(
      (0.42, (30, 40), [0.42], "match"),  # Within 2 points of the range.
      (0.43, (30, 40), [0.43], "miss"),
      (0.981, (100, 100), [0.981], "match"),
      (0.995, (85.7, 96.1), [0.995, 0.999], "ceiling"),
      (0.995, (85.7, 96.1), [0.995, 0.97], "miss"),  # One row below 99%.
  )
  def test_status(self, mean, band, compared, want):
    self.assertEqual(budget.status(mean, band, compared), want)

  @parameterized.parameters(
      (
          ["match", "match", "miss", "miss"],
          "reproduced at <= 160k strings, not at >= 640k strings under"
          " protocol P",
      ),
      (
          ["miss", "miss", "match", "match"],
          "reproduced at >= 640k strings, not at <= 160k strings under"
          " protocol P",
      ),
      (
          [None, "ceiling", "ceiling", "ceiling"],
          "untested: every row at the ceiling at 160k, 640k, 3.2M strings"
          " under protocol P",
      ),
      (
          [None, "miss", "miss", None],
          "not reproduced at 160k, 640k strings under protocol P",
      ),
      (
          ["match", "ceiling", "ceiling", "ceiling"],
          "reproduced at <= 64k strings; untested (ceiling) at >= 160k"
          " strings under protocol P",
      ),
      ([None] * 4, "untested: no runs at these budgets under protocol P"),
  )
  def test_verdict_text(self, statuses, want):
    got = budget.verdict(dict(zip(budget.BUDGETS, statuses)), "P")
    self.assertEqual(got, want)

  def _rows(self, sweep, finals_by_variant, steps=2):
    for variant, finals in finals_by_variant.items():
      for seed, a in enumerate(finals):
        write_run(sweep, seed, [0.3, a], steps=steps, variant=variant)
    paper = {("sparse", "attn"): "100", ("sparse", "res_ln"): "85.7-96.1"}
    rows = budget.group_rows(budget.read_runs(sweep), "k")
    return budget.table(rows, (10, 20, 30), paper)

  def test_claim_at_the_ceiling_is_untested(self):
    sweep = self.create_tempdir().full_path
    rows = self._rows(sweep, {"attn": [0.995, 0.999], "res_ln": [0.992] * 2})
    (group,) = budget.claim_groups(rows, {"c": ("attn", "res_ln")})
    budget.judge(group, (10, 20, 30))
    self.assertEqual(group["statuses"], {10: "miss", 20: "ceiling", 30: None})
    self.assertEqual([r["statuses"][20] for r in rows], ["match", "ceiling"])
    self.assertStartsWith(group["verdict"], "not reproduced at <= 10")

  def test_an_incomplete_cell_is_not_judged(self):
    sweep = self.create_tempdir().full_path
    write_run(sweep, 0, [0.3, 0.999, 0.999])
    write_run(sweep, 1, [0.3, 0.999], steps=3, stop=SUCCESS_STOP)
    write_run(sweep, 2, [0.3, 0.5], steps=3, stop=PLATEAU_STOP)
    rows = budget.table(
        budget.group_rows(budget.read_runs(sweep), "k"),
        (20, 30),
        {("sparse", "attn"): "about 30-40"},
        carry=("success",),  # The plateau-stopped seed counts nothing at 30.
    )
    self.assertLen(rows, 1)
    (group,) = budget.claim_groups(rows, {"c": ("attn",)})
    budget.judge(group, (20, 30))
    self.assertEqual(group["statuses"], {20: "miss", 30: None})


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
      write_run(sweep, seed, [0.3, 0.6, 0.995], steps=3)
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
