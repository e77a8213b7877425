"""`python -m launch.reproduce` at the quick profile: every result, a SIGTERM
recorded as the interrupted step, and an unknown profile."""

import json
import os
import signal
import subprocess
import sys
import time

from absl.testing import absltest
import pytest

from configs import reproduce as reproduce_config
from tests import cli_helpers
from tests import paths

ROOT = paths.ROOT


def reproduce_argv(workdir, profile="quick"):
  return [
      sys.executable,
      "-m",
      "launch.reproduce",
      f"--config={os.path.join(ROOT, 'configs', 'reproduce.py')}:{profile}",
      f"--workdir={workdir}",
  ]


def reproduce(workdir, profile="quick"):
  return subprocess.run(
      reproduce_argv(workdir, profile),
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=900,
      check=False,
  )


def pids_with_arg(arg):
  """Processes whose command line holds `arg`."""
  pids = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        if arg.encode() in f.read().split(b"\0"):
          pids.append(int(pid))
    except OSError:
      pass
  return pids


@pytest.mark.slow
class ReproduceTest(absltest.TestCase):

  def test_quick_profile_writes_every_result(self):
    tmp = self.create_tempdir().full_path
    proc = reproduce(tmp)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(tmp, "reproduce.json")) as f:
      report = json.load(f)
    steps = reproduce_config.get_config("quick").steps
    self.assertEqual(
        [s["name"] for s in report["steps"]], [s.name for s in steps]
    )
    self.assertTrue(report["complete"])
    self.assertTrue(
        all(s["finished"] and s["seconds"] > 0 for s in report["steps"])
    )
    # The machine's speed is recorded beside each step's time.
    self.assertTrue(all(s["dot_gflops"] > 0 for s in report["steps"]))
    with open(os.path.join(tmp, "README.md")) as f:
      index = f.read()
    # The index names every step's folder, with its state and its time at
    # the machine's measured speed.
    for step in reproduce_config.get_config("quick").steps:
      self.assertIn(f"| `{step.workdir}` |", index)
    self.assertNotIn("not run", index)
    self.assertIn("GFLOP/s", index)
    for name in (
        "simulate/simulate_table.json",
        "threshold/threshold.png",
        "compiled/dyck/compiled_ut.json",
        "compiled/khop1/compiled_ut.json",
        "dyck/counting_baseline.md",
        "khop/baselines/baselines.json",
        "khop/select/selection.json",
        "khop/select_uts/selection.json",
        "khop/select_batch/selection.json",
        "dyck/select/selection.json",
        "khop/curves.png",
        "khop/batch/paper.md",
        "machines/machines.md",
        "width/width.png",
        "learnability/learnability.png",
    ):
      self.assertTrue(os.path.exists(os.path.join(tmp, name)), name)
    for table in ("dyck", "khop"):
      with open(os.path.join(tmp, table, "table.json")) as f:
        got = json.load(f)
      self.assertEqual(got["missing_runs"], [])
      kinds = {r["kind"] for r in got["rows"]}
      self.assertEqual(
          kinds,
          {"sparse", "random", "trained", "compiled_sparse", "compiled_random"},
          table,
      )
    # The record of this run is not replaced by a second one.
    with open(os.path.join(tmp, "reproduce.json"), "rb") as f:
      before = f.read()
    proc = reproduce(tmp)
    cli_helpers.assert_one_line_error(
        self, proc, r"reproduce.json already exists;" r" pass --overwrite"
    )
    with open(os.path.join(tmp, "reproduce.json"), "rb") as f:
      self.assertEqual(f.read(), before)

    # An interrupted regeneration resumes: finished steps keep their times and
    # are not rerun; the interrupted step's time so far is added to its own.
    report = json.loads(before)
    report["complete"] = False
    report["steps"][-1].update(finished=False, seconds=1000.0)
    with open(os.path.join(tmp, "reproduce.json"), "w") as f:
      json.dump(report, f)
    proc = reproduce(tmp)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("0 to do", proc.stderr)  # The interrupted sweep had finished.
    with open(os.path.join(tmp, "reproduce.json")) as f:
      resumed = json.load(f)
    self.assertTrue(resumed["complete"])
    old, new = report["steps"], resumed["steps"]
    self.assertEqual(new[:-1], old[:-1])
    self.assertGreater(new[-1]["seconds"], 1000.0)
    self.assertTrue(new[-1]["finished"])
    self.assertTrue(os.path.exists(os.path.join(tmp, "README.md")))

  def test_sigterm_records_the_interrupted_step(self):
    tmp = self.create_tempdir().full_path
    step_arg = f"--workdir={tmp}/simulate"
    # The log goes to a file: a pipe would also wait for the step's process.
    log = open(os.path.join(self.create_tempdir().full_path, "log"), "w+")
    self.addCleanup(log.close)
    # The persistent compilation cache off: a warm one can finish the first
    # step (the simulate table) within the second before the signal.
    proc = subprocess.Popen(
        reproduce_argv(tmp),
        cwd=ROOT,
        stdout=log,
        stderr=log,
        env=dict(os.environ, UT_JAX_CACHE=""),
    )
    deadline = time.time() + 300
    while not pids_with_arg(step_arg):  # The first step's process has started.
      self.assertIsNone(proc.poll(), "reproduce ended before its first step")
      self.assertLess(time.time(), deadline)
      time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    log.seek(0)
    stderr = log.read()
    self.assertEqual(proc.returncode, 128 + signal.SIGTERM, stderr[-3000:])
    self.assertNotIn("Traceback", stderr)
    self.assertEqual(pids_with_arg(step_arg), [])  # The step was stopped too.
    with open(os.path.join(tmp, "reproduce.json")) as f:
      report = json.load(f)
    self.assertFalse(report["complete"])
    [step] = report["steps"]
    self.assertEqual(step["name"], "simulate")
    self.assertFalse(step["finished"])
    self.assertGreaterEqual(step["seconds"], 1.0)

  def test_unknown_profile_is_one_line(self):
    proc = reproduce(self.create_tempdir().full_path, profile="fast")
    cli_helpers.assert_one_line_error(self, proc, r"unknown profile 'fast'")


if __name__ == "__main__":
  absltest.main()
