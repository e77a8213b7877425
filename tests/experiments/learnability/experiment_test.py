"""The learnability experiment (ut.experiments.learnability): the smoke run's
programs, runs, report and figure, reruns and interruptions, and the config
it refuses."""

import csv
import glob
import json
import math
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from configs import learnability as learnability_config
from tests import cli_helpers
from tests import xla_settings
from ut.experiments import learnability
from ut.experiments import sweep
from ut.io import plots
from ut.training import checkpoint
from ut.training import held_out
from ut.training import train


def _read_json(workdir):
  with open(os.path.join(workdir, "learnability.json")) as f:
    return json.load(f)


class LearnabilityRunTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = tempfile.mkdtemp(prefix="learnability_test_")
    cls.config = learnability_config.get_config("smoke")
    cls.config.target.train.steps = 30
    cls.config.noises = tuple(reversed(cls.config.noises))  # Run sorted.
    with xla_settings.fast_compile():
      cls.result = learnability.run(cls.config, cls.workdir)

  def test_programs_reproduce_the_target(self):
    for ut, program in self.result["programs"].items():
      self.assertEqual(program["agreement"], 1.0, ut)
      self.assertEqual(program["ut_accuracy"], program["target_accuracy"])
      saved = np.load(os.path.join(self.workdir, "programs", f"{ut}.npz"))
      tables = [saved["embed/token"], saved["embed/position"]]
      want = np.sqrt(np.mean(np.concatenate([t.ravel() for t in tables]) ** 2))
      self.assertAlmostEqual(program["e_rms"], float(want), places=5)

  def test_runs_go_cheapest_first_and_rows_in_table_order(self):
    finished = sorted(
        glob.glob(os.path.join(self.workdir, "runs", "*", "metrics.json")),
        key=os.path.getmtime,
    )
    names = [os.path.basename(os.path.dirname(p)) for p in finished]
    want = [
        f"{ut}_{start}_seed={seed}"
        for ut in ("sparse", "random")
        for start in ("noise=0", "noise=1", "scratch")
        for seed in self.config.seeds
    ]
    self.assertEqual(names, want)
    self.assertEqual(
        [(r["ut"], r["start"]) for r in self.result["rows"]],
        [
            (ut, start)
            for ut in ("sparse", "random")
            for start in ("scratch", "noise=0", "noise=1")
        ],
    )

  def test_figure_shows_a_program_whose_runs_are_pending(self):
    partial = dict(
        self.result,
        rows=[r for r in self.result["rows"] if r["ut"] == "sparse"],
    )
    labels = plots.learnability(partial).axes[0].get_legend_handles_labels()[1]
    m = self.result["programs"]["random"]["m"]
    self.assertIn(f"random UT (m={m}): compiled, no step", labels)
    self.assertNotIn("random UT: from a random start", labels)
    self.assertIn("sparse UT: from a random start", labels)

  def test_noise_zero_starts_at_the_targets_accuracy(self):
    # Independent of the UT: the target itself scored on each run's test set.
    params, spec, _, task, _ = checkpoint.restore_params(
        os.path.join(self.workdir, "target")
    )
    for ut in self.config.constructions:
      for seed in self.config.seeds:
        name = f"{ut}_noise=0_seed={seed}"
        with open(os.path.join(self.workdir, "runs", name, "start.json")) as f:
          got = json.load(f)["start_accuracy"]
        run_config = self.config.ut.copy_and_resolve_references()
        run_config.seed = seed
        want = held_out.test_metrics(params, spec, run_config, task)
        self.assertAlmostEqual(got, want["test_accuracy"], places=6, msg=name)

  def test_outputs_and_rerun_keeps_finished_runs(self):
    for ext in ("json", "md", "png"):
      self.assertTrue(
          os.path.exists(os.path.join(self.workdir, f"learnability.{ext}"))
      )
    # Each run's time, from its log: its steps over their logged rates.
    for r in self.result["rows"]:
      self.assertGreater(r["train_minutes"], 0)
    name = self.result["rows"][0]["runs"].split(";")[0]
    with open(
        os.path.join(self.workdir, "runs", name, "train_metrics.csv")
    ) as f:
      rows = list(csv.DictReader(f))
    steps = [0] + [int(r["step"]) for r in rows]
    want = sum(
        (b - a) / float(r["steps_per_sec"])
        for a, b, r in zip(steps, steps[1:], rows)
    )
    self.assertAlmostEqual(
        sweep.train_minutes(os.path.join(self.workdir, "runs", name)),
        want / 60,
    )
    metrics = sorted(
        glob.glob(os.path.join(self.workdir, "runs/*/metrics.json"))
    )
    self.assertLen(metrics, 2 * (1 + len(self.config.noises)) * 2)
    before = {p: os.path.getmtime(p) for p in metrics}
    cli_helpers.assert_user_error(
        self,
        r"learnability.json already exists",
        learnability.run,
        self.config,
        self.workdir,
    )
    config = self.config.copy_and_resolve_references()
    config.overwrite = True
    again = learnability.run(config, self.workdir)
    self.assertEqual(again["per_run"], self.result["per_run"])
    self.assertEqual(before, {p: os.path.getmtime(p) for p in metrics})

  def _copy_of_workdir(self):
    """A new workdir holding this one's target, programs and runs."""
    workdir = self.create_tempdir().full_path
    for folder in ("target", "programs", "runs"):
      shutil.copytree(
          os.path.join(self.workdir, folder), os.path.join(workdir, folder)
      )
    return workdir

  def test_scratch_false_leaves_out_the_random_start(self):
    workdir = self._copy_of_workdir()
    config = self.config.copy_and_resolve_references()
    config.scratch = False
    with mock.patch.object(
        train, "train_and_evaluate", side_effect=AssertionError("trained")
    ):
      result = learnability.run(config, workdir)
    starts = {(r["ut"], r["start"]) for r in result["rows"]}
    want = {
        (ut, learnability.start_name(s))
        for ut in config.constructions
        for s in config.noises
    }
    self.assertEqual(starts, want)
    self.assertIsNone(result.get("pending"))
    config.noises = ()
    cli_helpers.assert_user_error(
        self,
        r"config.noises is empty and config.scratch is False",
        learnability.run,
        config,
        self.create_tempdir().full_path,
    )

  def test_runs_on_an_accelerator_count_apart_from_core_minutes(self):
    rows = self.result["rows"]
    self.assertTrue(all(r["accelerator_runs"] == 0 for r in rows))
    self.assertNotIn("on an accelerator", learnability.markdown(self.result))
    gpu = dict(
        rows[0],
        train_minutes=0.0,
        accelerator_runs=2,
        accelerator_minutes=90.0,
        accelerators="NVIDIA H200",
    )
    text = learnability.markdown(dict(self.result, rows=[gpu] + rows[1:]))
    cpu = sum(r["train_minutes"] for r in rows[1:])
    self.assertIn(f"Training: {cpu:.0f} core-minutes on the CPU", text)
    self.assertIn("2 runs trained on NVIDIA H200 instead", text)
    self.assertIn("may have been shared", text)
    self.assertIn("90 minutes of their training steps", text)

  def test_a_finished_run_of_another_lr_is_refused(self):
    workdir = self._copy_of_workdir()
    config = self.config.copy_and_resolve_references()
    config.lr.sparse = config.lr.sparse / 10
    with mock.patch.object(
        train, "train_and_evaluate", side_effect=AssertionError("trained")
    ):
      cli_helpers.assert_user_error(
          self,
          r"sparse_noise=0_seed=0 was trained with another config \(differs"
          r" in train.lr\); move that run folder away",
          learnability.run,
          config,
          workdir,
      )

  def test_each_ut_trains_at_its_own_lr(self):
    for ut in self.config.constructions:
      with open(
          os.path.join(
              self.workdir, "runs", f"{ut}_noise=0_seed=0", "config.json"
          )
      ) as f:
        self.assertEqual(json.load(f)["train"]["lr"], self.config.lr[ut], ut)

  def test_an_interrupted_run_leaves_a_partial_report_and_continues(self):
    workdir = tempfile.mkdtemp(prefix="learnability_partial_")
    shutil.copytree(self.workdir, workdir, dirs_exist_ok=True)
    for ext in ("json", "md", "png"):
      os.remove(os.path.join(workdir, f"learnability.{ext}"))
    # The random starts run last of each UT: drop them, and stop at the first.
    scratch = sorted(glob.glob(os.path.join(workdir, "runs", "*_scratch_*")))
    self.assertLen(scratch, 2 * len(self.config.seeds))
    for d in scratch:
      shutil.rmtree(d)

    def killed(*args, **kwargs):
      del args, kwargs
      raise KeyboardInterrupt

    with mock.patch.object(train, "train_and_evaluate", killed):
      with self.assertRaises(KeyboardInterrupt):
        learnability.run(self.config, workdir)
    with open(os.path.join(workdir, "learnability.json")) as f:
      partial = json.load(f)
    # Killed at the sparse UT's random start, the first of the runs dropped;
    # the random UT's rows come after it (its finished runs not yet read).
    self.assertEqual(
        partial["pending"],
        [
            "sparse scratch",
            "random scratch",
            "random noise=0",
            "random noise=1",
        ],
    )
    self.assertEqual(
        [(r["ut"], r["start"]) for r in partial["rows"]],
        [("sparse", "noise=0"), ("sparse", "noise=1")],
    )
    # The random UT's rows have every seed's run on disk, the scratch rows none.
    n = len(self.config.seeds)
    self.assertEqual(
        partial["pending_seeds_done"],
        {"random noise=0": n, "random noise=1": n},
    )
    with open(os.path.join(workdir, "learnability.md")) as f:
      self.assertIn(
          "Pending (not all seeds run yet): sparse scratch, random scratch, "
          f"random noise=0 ({n} seeds finished), random noise=1 ({n} seeds "
          "finished).",
          f.read(),
      )
    # Another configuration does not continue it, nor overwrite it.
    other = self.config.copy_and_resolve_references()
    other.noises = (0.0,)
    cli_helpers.assert_user_error(
        self,
        r"unfinished run of another configuration",
        learnability.run,
        other,
        workdir,
    )
    self.assertEqual(partial["pending"], _read_json(workdir)["pending"])
    # report_only trains nothing: every row whose runs are finished, the
    # random starts pending.
    only = self.config.copy_and_resolve_references()
    only.report_only = True
    with mock.patch.object(train, "train_and_evaluate", killed):
      reported = learnability.run(only, workdir)
    self.assertEqual(reported["pending"], ["sparse scratch", "random scratch"])
    self.assertEqual(
        [(r["ut"], r["start"]) for r in reported["rows"]],
        [(ut, f"noise={s}") for ut in ("sparse", "random") for s in (0, 1)],
    )
    # The same command continues it (no overwrite needed) and retrains only
    # the missing runs, to the same accuracies as the uninterrupted run.
    kept = {
        p: os.path.getmtime(p)
        for p in glob.glob(os.path.join(workdir, "runs", "*", "metrics.json"))
    }
    done = learnability.run(self.config, workdir)
    self.assertIsNone(done["pending"])
    self.assertEqual(kept, {p: os.path.getmtime(p) for p in kept})
    self.assertEqual(done["per_run"], self.result["per_run"])
    timeless = lambda rows: [
        {k: v for k, v in r.items() if k != "train_minutes"} for r in rows
    ]
    self.assertEqual(timeless(done["rows"]), timeless(self.result["rows"]))


class NoisyProgramTest(absltest.TestCase):

  def test_bad_config_is_user_error(self):
    config = learnability_config.get_config("smoke")
    config.noises = (0.1, -1.0)
    cli_helpers.assert_user_error(
        self,
        r"config.noises has -1.0; use numbers >= 0",
        learnability.check_config,
        config,
    )
    config = learnability_config.get_config("smoke")
    config.target.model.variant = "res_ln"
    cli_helpers.assert_user_error(
        self,
        r"must train an attention-only model",
        learnability.check_config,
        config,
    )
    for field, value, message in (
        ("noises", (0.0, 1.0, 1), r"config.noises=.*distinct noise sizes"),
        ("constructions", (), r"config.constructions=\(\); use sparse"),
        ("constructions", ("sparse", "sparse"), r"each once"),
        ("lr", dict(sparse=1e-2, random=0.0), r"config.lr.random=0.0; use"),
        ("lr", dict(sparse=1e-2, random=math.nan), r"config.lr.random=nan"),
        ("lr", dict(sparse=1e-2), r"config.lr.random=None; use a learning"),
    ):
      config = learnability_config.get_config("smoke")
      config[field] = value
      cli_helpers.assert_user_error(
          self, message, learnability.check_config, config
      )


if __name__ == "__main__":
  absltest.main()
