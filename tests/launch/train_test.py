"""`python -m launch.train` as a user runs it: a SIGKILL in the middle of a run
followed by a resume, data parallel on 2 CPU devices, and one-line errors."""

import os
import re
import signal
import subprocess
import sys
import time

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from tests import cli_helpers
from tests import paths
from tests import train_helpers

ROOT = paths.ROOT


def train_command(workdir, *overrides, config="configs/dyck.py:smoke"):
  return [
      sys.executable,
      "-m",
      "launch.train",
      f"--config={config}",
      f"--workdir={workdir}",
      *overrides,
  ]


def run_train(workdir, *overrides, config="configs/dyck.py:smoke"):
  return subprocess.run(
      train_command(workdir, *overrides, config=config),
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      check=False,
  )


@pytest.mark.slow  # Each test runs launch.train as a command.
class CommandLineTest(parameterized.TestCase):

  def assert_one_line_error(self, proc, pattern):
    line = cli_helpers.assert_one_line_error(self, proc, pattern)
    return line

  def test_kill_and_resume_matches_uninterrupted_run(self):
    overrides = (
        "--config.train.steps=60",
        "--config.train.checkpoint_every=10",
        "--config.eval.test_each=True",  # The test curve resumes too.
    )
    steps = 60
    whole = self.create_tempdir("whole").full_path
    killed = self.create_tempdir("killed").full_path

    proc = run_train(whole, *overrides)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])

    log_path = os.path.join(killed, "first_attempt.log")
    with open(log_path, "w") as log:
      child = subprocess.Popen(
          train_command(killed, *overrides),
          cwd=ROOT,
          stdout=log,
          stderr=subprocess.STDOUT,
      )
    ckpt_dir = os.path.join(killed, "checkpoints")
    done_steps = []
    deadline = time.time() + 240
    try:
      while child.poll() is None and time.time() < deadline:
        if os.path.isdir(ckpt_dir):  # Finished step dirs only (not *.tmp-*).
          done_steps = [int(n) for n in os.listdir(ckpt_dir) if n.isdigit()]
          if done_steps:
            child.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    finally:
      if child.poll() is None and not done_steps:
        child.kill()
      child.wait()
    self.assertTrue(done_steps, "no checkpoint appeared before the run ended")
    self.assertEqual(child.returncode, -signal.SIGKILL)
    # Killed mid-run: a checkpoint short of the end, and no final metrics.
    self.assertLess(min(done_steps), steps)
    self.assertEqual(min(done_steps) % 10, 0)
    self.assertFalse(os.path.exists(os.path.join(killed, "metrics.json")))

    proc = run_train(killed, *overrides)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    resumed = re.search(r"resumed from checkpoint at step (\d+)", proc.stderr)
    self.assertIsNotNone(resumed, proc.stderr[-3000:])
    self.assertBetween(int(resumed.group(1)), 10, steps - 1)

    want = train_helpers.read_json(os.path.join(whole, "metrics.json"))
    got = train_helpers.read_json(os.path.join(killed, "metrics.json"))
    for key in train_helpers.FINAL_KEYS + (
        "curve",
        "test_curve",
        "test_at_best_valid",
    ):
      self.assertEqual(got[key], want[key], key)
    self.assertEqual(
        [s for s, _ in got["test_curve"]], [s for s, _ in got["curve"]]
    )
    self.assertEqual(
        train_helpers.read_csv(
            os.path.join(killed, "train_metrics.csv"),
            train_helpers.TRAIN_COLUMNS,
        ),
        train_helpers.read_csv(
            os.path.join(whole, "train_metrics.csv"),
            train_helpers.TRAIN_COLUMNS,
        ),
    )
    self.assertEqual(
        train_helpers.read_csv(os.path.join(killed, "eval_metrics.csv")),
        train_helpers.read_csv(os.path.join(whole, "eval_metrics.csv")),
    )

  def test_divergence_is_one_line_error(self):
    workdir = self.create_tempdir().full_path
    proc = run_train(
        workdir, "--config.train.lr=1e30", "--config.train.grad_clip=1e30"
    )
    line = self.assert_one_line_error(
        proc,
        r"^error: loss became (nan|inf|-inf) at step \d+ .*--config\.train\.lr",
    )
    step = int(re.search(r"at step (\d+)", line).group(1))
    self.assertBetween(step, 1, 4)  # The smoke run has 4 steps.
    self.assertEqual(proc.returncode, 2)
    self.assertFalse(os.path.exists(os.path.join(workdir, "metrics.json")))

  def test_data_parallel_run_matches_one_device_run(self):
    # 2 CPU devices, each with half of every batch, against the same run on
    # one device: equal up to the order of float additions. (The random UT's
    # data-parallel step: bench_test.DpBenchTest.)
    config = "configs/dyck.py:smoke,model=sparse,variant=res_ln"
    overrides = ("--config.train.steps=12",)
    one = self.create_tempdir("one").full_path
    two = self.create_tempdir("two").full_path
    proc = run_train(one, *overrides, config=config)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    cores = len(os.sched_getaffinity(0))
    if cores > 1:  # One device on several cores: the log says how to use them.
      self.assertIn(f"--cpu_devices={cores}` splits each batch", proc.stderr)
    proc = run_train(
        two,
        *overrides,
        "--cpu_devices=2",  # Data parallel.
        "--config.cpu.ynn_fusions=False",
        config=config,
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    want = train_helpers.read_json(os.path.join(one, "metrics.json"))
    got = train_helpers.read_json(os.path.join(two, "metrics.json"))
    self.assertEqual(got["step"], 12)
    self.assertTrue(
        train_helpers.read_json(os.path.join(two, "config.json"))["train"][
            "data_parallel"
        ]
    )
    for key in (
        "eval_accuracy",
        "eval_loss",
        "final_train_loss",
        "param_checksum",
    ):
      self.assertAlmostEqual(
          got[key], want[key], delta=1e-4 * abs(want[key]), msg=key
      )
    self.assertIn("each batch split over 2 cpu devices", proc.stderr)
    self.assertNotIn("splits each batch", proc.stderr)

  def test_data_parallel_batch_must_split_evenly(self):
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    proc = run_train(workdir, "--cpu_devices=3")
    self.assert_one_line_error(
        proc, r"config.train.batch_size=8 must be a multiple of the 3 devices"
    )
    self.assertFalse(os.path.exists(workdir))

  def test_bad_cpu_devices_is_one_line_error(self):
    proc = run_train(self.create_tempdir().full_path, "--cpu_devices=0")
    self.assert_one_line_error(proc, r"--cpu_devices=0 must be at least 1")

  @parameterized.named_parameters(
      (
          "log_every",
          "--config.train.log_every=0",
          r"config.train.log_every=0; use an integer >= 1",
      ),
      (
          "eval_every",
          "--config.eval.every=-5",
          r"config.eval.every=-5; use an integer >= 1",
      ),
      (
          "checkpoint_every",
          "--config.train.checkpoint_every=0",
          r"config.train.checkpoint_every=0; use an integer >= 1",
      ),
      (
          "steps",
          "--config.train.steps=0",
          r"config.train.steps=0; use an integer >= 1",
      ),
      (
          "ut_seed",
          "--config.model.ut_seed=-1",
          r"model.ut_seed=-1 must be a non-negative integer",
      ),
      (
          "lr",
          "--config.train.lr=-0.01",
          r"config.train.lr=-0.01; use a positive",
      ),
      (
          "lr_text",
          "--config.train.lr=fast",
          r"flag --config.train.lr=fast: could not convert string to float",
      ),
      (
          "init_params_missing",
          "--config.train.init_params=/nonexistent/e.npz",
          r"config.train.init_params='/nonexistent/e.npz' is not a file",
      ),
      (
          "misspelt_field",
          "--config.train.step=10",
          r"no such config field: 'step'; Did you mean \"steps\"",
      ),
      (
          "positional",
          "model=sparse",
          r"unexpected argument\(s\) model=sparse; ",
      ),
  )
  def test_bad_config_value_is_one_line_error(self, override, pattern):
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    proc = run_train(workdir, override)
    self.assert_one_line_error(proc, pattern)
    self.assertFalse(os.path.exists(workdir))

  def test_workdir_that_cannot_be_a_folder_is_one_line_error(self):
    path = os.path.join(self.create_tempdir().full_path, "afile")
    with open(path, "w") as f:
      f.write("keep me")
    for workdir, pattern in (
        (path, r"--workdir=.*afile is a file; use a folder"),
        (path + "/run", r"afile is a file, not a folder"),
        ("", r"--workdir is empty"),
    ):
      self.assert_one_line_error(run_train(workdir), pattern)
    with open(path) as f:
      self.assertEqual(f.read(), "keep me")

  @parameterized.named_parameters(
      (
          "unknown_model",
          "configs/dyck.py:model=bogus",
          r"unknown model kind 'bogus'",
      ),
      (
          "unknown_argument",
          "configs/dyck.py:foo=1",
          r"unknown config argument 'foo'",
      ),
      (
          "unknown_variant",
          "configs/dyck.py:smoke,variant=nope",
          r"unknown variant 'nope'",
      ),
      (
          "negative_embed_scale",
          "configs/khop.py:smoke,embed_scale=-1",
          r"model.embed_scale=-1.0 must be a positive number",
      ),
  )
  def test_bad_config_argument_is_one_line_error(self, config, pattern):
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    proc = run_train(workdir, config=config)
    self.assert_one_line_error(proc, pattern)
    self.assertFalse(os.path.exists(os.path.join(workdir, "config.json")))


if __name__ == "__main__":
  absltest.main()
