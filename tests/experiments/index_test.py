"""ut.experiments.index: results/README.md's state of each folder, read from
its files alone."""

import json
import os

from absl.testing import absltest
import ml_collections

from configs import reproduce as reproduce_config
from tests import paths
from ut.experiments import index
from ut.experiments.sweep import plan

SWEEP = "configs/khop_select.py:smoke,ks=2"


def _step(**fields):
  base = dict(
      name="x", about="what", module="launch.simulate", config=None,
      output=None, flags=(), workdir="x", out_flag="--workdir",
  )
  return ml_collections.ConfigDict({**base, **fields})


class IndexTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path

  def _write(self, rel, content):
    path = os.path.join(self.root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(content, f)

  def test_an_output_step_is_not_run_partial_or_complete(self):
    step = _step(output="report.json")
    self.assertEqual(index.step_state(step, self.root)[0], "not run")
    self._write("x/report.json", {"pending": ["a row"]})
    self.assertEqual(index.step_state(step, self.root)[0], "partial")
    self._write(
        "x/report.json",
        {"provenance": {"git_commit": "0123456789abcdef+dirty",
                        "jax_version": "9.9"}},
    )
    state, prov = index.step_state(step, self.root)
    self.assertEqual(state, "complete")
    self.assertEqual(index._short(prov["git_commit"]), "0123456+dirty")

  def test_a_sweep_counts_its_recorded_runs_against_its_plan(self):
    step = _step(module="launch.sweep", config=SWEEP, workdir="s")
    runs = plan.collect_runs(
        plan.load_config_module(SWEEP), plan.config_arg(SWEEP)
    )
    self.assertGreater(len(runs), 1)
    self.assertEqual(index.step_state(step, self.root)[0], "not run")
    # A run folder without a recorded config is not a recorded run.
    self._write(f"s/runs/{runs[0][0]}/metrics.json", {"config": None})
    self.assertEqual(
        index.step_state(step, self.root)[0],
        f"0 of {len(runs)} runs recorded",
    )
    for name, _ in runs:
      self._write(f"s/runs/{name}/metrics.json", {"config": {}})
    self.assertEqual(
        index.step_state(step, self.root)[0],
        f"{len(runs)} of {len(runs)} runs recorded",  # No table.json yet.
    )
    self._write("s/table.json", {"provenance": {"git_commit": "abcdef0123"}})
    state, prov = index.step_state(step, self.root)
    self.assertEqual(state, f"complete: {len(runs)} runs")
    self.assertEqual(prov["git_commit"], "abcdef0123")

  def test_the_index_lists_every_step_and_other_folder_once_per_row(self):
    config = reproduce_config.get_config("quick")
    text = index.write_index(config, self.root)
    with open(os.path.join(self.root, "README.md")) as f:
      self.assertEqual(f.read(), text)
    rows = [l for l in text.splitlines() if l.startswith("| `")]
    self.assertLen(rows, len(config.steps) + len(config.others))
    for step, row in zip(config.steps, rows):
      self.assertIn(f"`{step.workdir}`", row)
      self.assertIn(
          f"--config={step.config}" if step.config else step.module, row
      )
      self.assertIn(f"--workdir={self.root}/{step.workdir}", row)
      self.assertTrue(row.endswith("| not run |  |"), row)

  def test_the_committed_index_is_the_one_the_command_writes(self):
    root = os.path.join(paths.ROOT, "results")
    with open(os.path.join(root, "README.md")) as f:
      committed = f.read()
    cwd = os.getcwd()
    try:  # Its commands and paths read as from the repository root.
      os.chdir(os.path.dirname(root))
      rows = index.rows(reproduce_config.get_config("full"), "results")
    finally:
      os.chdir(cwd)
    self.assertEqual(
        committed, index.HEADER.format(root="results") + index._markdown(rows)
        + "\n"
    )


if __name__ == "__main__":
  absltest.main()
