"""`python -m launch.sweep` as a user runs it: 8 emulated devices give the
metrics of runs done one by one; restarts, worker processes, diverging runs,
and two JAX processes giving the one-process table.

The multi-host test runs the sweep as two processes (`--distributed`,
coordinated on localhost) over 2 CPU devices each.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

from absl.testing import absltest
import numpy as np
import pytest

from tests import cli_helpers
from tests import paths
from tests import sweep_config
from ut.experiments import sweep
from ut.training import train

ROOT = paths.ROOT
CONFIG = os.path.join(ROOT, "tests", "sweep_config.py")


def run_sweep_cli(workdir, devices, arg=None, *flags):
  env = dict(
      os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}"
  )
  config = CONFIG + (f":{arg}" if arg else "")
  return subprocess.run(
      [
          sys.executable,
          "-m",
          "launch.sweep",
          f"--config={config}",
          f"--workdir={workdir}",
          *flags,
      ],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
  )


def _read(path):
  with open(path) as f:
    return f.read()


def _alive(pid):
  """Whether process `pid` exists and is not a zombie."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


HOSTS_CONFIG = os.path.join(ROOT, "tests", "sweep_config.py") + ":hosts"
# A sweep whose logs stay silent this long (seconds) has hung: the test kills
# its processes and fails, less than 3 minutes after the hang began. (Compiling
# a step logs nothing; on 2 loaded cores it took up to 40 s.)
STALL = 150
LIMIT = 600  # Seconds for all processes of one sweep, hung or not.
# What each run's record must reproduce exactly.
RUN_KEYS = (
    "step",
    "eval_accuracy",
    "eval_loss",
    "final_train_loss",
    "param_checksum",
    "diverged",
)


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def sweep_command(workdir, *flags):
  return [
      sys.executable,
      "-m",
      "launch.sweep",
      f"--config={HOSTS_CONFIG}",
      f"--workdir={workdir}",
      *flags,
  ]


def run_all(commands, logs, devices):
  """Runs the commands side by side, each with `devices` CPU devices, and
  returns their exit codes; raises TimeoutError (killing them all) once their
  logs stay silent for STALL seconds, or after LIMIT."""
  env = dict(
      os.environ,
      XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
      JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
      JAX_PLATFORMS="cpu",
  )
  procs = []
  try:
    for command, log in zip(commands, logs):
      with open(log, "w") as f:
        # A session of its own: a kill reaches the process and its children.
        procs.append(
            subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    start = last = time.time()
    sizes = None
    while any(p.poll() is None for p in procs):
      now = time.time()
      if sizes != (sizes := [os.path.getsize(log) for log in logs]):
        last = now
      if now - last > STALL or now - start > LIMIT:
        raise TimeoutError(
            f"no output for {now - last:.0f} s, " f"{now - start:.0f} s in all"
        )
      time.sleep(0.5)
    return [p.returncode for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def read_json(path):
  with open(path) as f:
    return json.load(f)


def files_under(folder):
  return sorted(
      os.path.relpath(os.path.join(d, f), folder)
      for d, _, files in os.walk(folder)
      for f in files
  )


def _tails(logs):
  out = []
  for log in logs:
    with open(log) as f:
      out.append(f"--- {os.path.basename(log)}\n{f.read()[-3000:]}")
  return "\n".join(out)


class SweepTest(absltest.TestCase):

  @pytest.mark.slow
  def test_eight_devices_match_one_by_one(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, devices=8)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("8 device(s)", proc.stderr)
    self.assertIn("vmapped groups", proc.stderr)
    runs = sweep.collect_runs(sweep_config)
    self.assertLen(runs, 8)
    self.assertLen(
        {sweep.group_key(c) for _, c in runs}, 1
    )  # One vmapped group.
    for name, config in runs:
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got = json.load(f)
      want = train.train_and_evaluate(config, os.path.join(tmp, "single", name))
      self.assertEqual(got["eval_accuracy"], want["eval_accuracy"], name)
      for key in ("eval_loss", "final_train_loss", "param_checksum"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=name)
    # Learning rates really differ between runs of the group.
    losses = {
        n: json.load(open(os.path.join(tmp, "runs", n, "metrics.json")))[
            "final_train_loss"
        ]
        for n, _ in runs
    }
    self.assertGreater(len(set(losses.values())), 4)
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertLen(table["rows"], 2)  # Two learning rates, 4 seeds each.
    for row in table["rows"]:
      self.assertEqual(row["seeds"], 4)
      accs = [
          json.load(open(os.path.join(tmp, "runs", n, "metrics.json")))[
              "eval_accuracy"
          ]
          for n in row["runs"].split(";")
      ]
      self.assertAlmostEqual(row["accuracy_mean"], np.mean(accs))
      self.assertAlmostEqual(row["accuracy_std"], np.std(accs, ddof=1))

  @pytest.mark.slow
  def test_test_each_flag_reaches_every_run_and_the_table(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "sparse", "--test_each")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    names = [n for n, _ in sweep.collect_runs(sweep_config, "sparse")]
    for name in names:
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got = json.load(f)
      self.assertTrue(got["config"]["eval"]["test_each"], name)
      self.assertEqual(
          [s for s, _ in got["test_curve"]], [s for s, _ in got["curve"]]
      )
    with open(os.path.join(tmp, "table.md")) as f:
      self.assertIn("test at best valid", f.readline())
    # Without the flag the recorded runs are another config: refused, kept.
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    self.assertNotEqual(proc.returncode, 0)
    self.assertRegex(proc.stderr, r"differs in eval\.test_each")
    self.assertTrue(
        os.path.exists(os.path.join(tmp, "runs", names[0], "metrics.json"))
    )

  @pytest.mark.slow
  def test_restart_skips_finished_runs(self):
    # The sparse kind with res_ln_mlp, vmapped on a 1-device mesh.
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "sparse", "--batching=vmap")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    runs = sweep.collect_runs(sweep_config, "sparse")
    name = runs[1][0]
    path = os.path.join(tmp, "runs", name, "metrics.json")
    others = {
        n: os.path.getmtime(os.path.join(tmp, "runs", n, "metrics.json"))
        for n, _ in runs
        if n != name
    }
    os.remove(path)
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertFalse(os.path.exists(path))  # Nothing trained.
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual(table["missing_runs"], [name])
    self.assertEqual([r["seeds"] for r in table["rows"]], [2])
    proc = run_sweep_cli(tmp, 1, "sparse", "--batching=vmap")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("1 to do", proc.stderr)
    self.assertTrue(os.path.exists(path))
    # The group had a checkpoint folder, gone once its run was recorded.
    self.assertEqual(os.listdir(os.path.join(tmp, "groups")), [])
    for n, mtime in others.items():
      self.assertEqual(
          os.path.getmtime(os.path.join(tmp, "runs", n, "metrics.json")), mtime
      )

  @pytest.mark.slow
  def test_runs_recorded_with_another_config(self):
    """A recorded run whose config differs from the sweep's stops the sweep
    with a one-line error naming the field; the others count as done."""
    tmp = self.create_tempdir().full_path
    runs = sweep.collect_runs(sweep_config, "sparse")
    for i, (name, config) in enumerate(runs):
      recorded = json.loads(config.to_json_best_effort())
      if i == 2:
        recorded["train"]["steps"] = 999
      os.makedirs(os.path.join(tmp, "runs", name))
      with open(os.path.join(tmp, "runs", name, "metrics.json"), "w") as f:
        json.dump(
            dict(
                config=recorded,
                name=name,
                eval_accuracy=0.5,
                task="dyck",
                kind="sparse",
                variant="res_ln_mlp",
            ),
            f,
        )
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    cli_helpers.assert_one_line_error(
        self,
        proc,
        rf"runs/{re.escape(runs[2][0])} was recorded with another "
        r"config \(differs in train.steps\)",
    )
    os.remove(os.path.join(tmp, "runs", runs[2][0], "metrics.json"))
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual([r["seeds"] for r in table["rows"]], [2])  # One cell.
    self.assertEqual(table["missing_runs"], [runs[2][0]])

  @pytest.mark.slow
  def test_workers_share_the_runs(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "kinds", "--workers=2")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    trained = [
        int(n)
        for n in re.findall(
            r"worker \d of 2: trained (\d) of 6 work units", proc.stderr
        )
    ]
    self.assertLen(trained, 2)
    self.assertEqual(sum(trained), 6)  # One run per unit on one CPU device.
    claimed = re.findall(r"claimed (\S+) \(1 runs\)", proc.stderr)
    self.assertLen(claimed, 6)
    self.assertLen(set(claimed), 6)  # Each run trained once.
    self.assertFalse(os.path.exists(os.path.join(tmp, "claims")))
    self.assertNotIn("os.fork() was called", proc.stderr)  # Harmless here.
    self.assertNotEmpty(os.listdir(os.path.join(tmp, "jax_cache")))
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual(table["missing_runs"], [])
    self.assertEqual(
        sorted(r["kind"] for r in table["rows"]),
        ["random", "sparse", "trained"],
    )
    for name, config in sweep.collect_runs(sweep_config, "kinds"):
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got = json.load(f)
      want = train.train_and_evaluate(config, os.path.join(tmp, "single", name))
      np.testing.assert_allclose(
          got["eval_loss"], want["eval_loss"], rtol=1e-4, err_msg=name
      )

  @pytest.mark.slow
  def test_workers_stop_when_the_sweep_is_killed(self):
    tmp = self.create_tempdir().full_path
    log = os.path.join(tmp, "stderr.txt")
    with open(log, "w") as err:
      parent = subprocess.Popen(
          [
              sys.executable,
              "-m",
              "launch.sweep",
              f"--config={CONFIG}:long",
              f"--workdir={tmp}",
              "--workers=2",
          ],
          cwd=ROOT,
          stderr=err,
      )
    workers = []
    try:
      deadline = time.time() + 300
      while len(re.findall(r"step \d+/1000000", _read(log))) < 2:
        self.assertIsNone(parent.poll(), _read(log)[-3000:])
        self.assertLess(time.time(), deadline, "workers never started training")
        time.sleep(0.5)
      with open(f"/proc/{parent.pid}/task/{parent.pid}/children") as f:
        workers += [int(p) for p in f.read().split()]
      self.assertLen(workers, 2)
      parent.send_signal(signal.SIGKILL)  # No `finally` runs in the sweep.
      parent.wait()
      deadline = time.time() + 30
      while any(map(_alive, workers)) and time.time() < deadline:
        time.sleep(0.2)
      self.assertEqual([w for w in workers if _alive(w)], [])
    finally:
      parent.kill()
      for w in workers:
        if _alive(w):
          os.kill(w, signal.SIGKILL)

  @pytest.mark.slow
  def test_compiled_rows_reuse_the_trained_run(self):
    tmp = self.create_tempdir().full_path
    config = (
        os.path.join(ROOT, "configs", "dyck_table.py")
        + ":smoke,kinds=trained,variants=attn,seeds=2,mixes=hard"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.sweep",
            f"--config={config}",
            f"--workdir={tmp}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(tmp, "table.json")) as f:
      rows = {r["kind"]: r for r in json.load(f)["rows"]}
    self.assertEqual(
        sorted(rows), ["compiled_random", "compiled_sparse", "trained"]
    )
    for kind in ("compiled_random", "compiled_sparse"):
      self.assertGreaterEqual(rows[kind]["agreement_min"], 0.999)
      for name in rows[kind]["runs"].split(";"):
        with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
          got = json.load(f)
        target = name.replace(f"_compiled={kind.split('_')[1]}", "")
        self.assertEqual(got["target_dir"], os.path.join(tmp, "runs", target))
        with open(os.path.join(tmp, "runs", target, "metrics.json")) as f:
          self.assertEqual(
              got["target_accuracy"], json.load(f)["eval_accuracy"]
          )
        self.assertFalse(
            os.path.exists(os.path.join(tmp, "runs", name, "target"))
        )

  @pytest.mark.slow
  def test_a_diverged_run_is_recorded_and_the_sweep_goes_on(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "diverges")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    names = [n for n, _ in sweep.collect_runs(sweep_config, "diverges")]
    bad, _, bad_target, bad_compiled = names
    got = {}
    for name in names:
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got[name] = json.load(f)
    self.assertTrue(np.isnan(got[bad]["eval_accuracy"]))
    self.assertRegex(got[bad]["diverged"], r"loss became nan at step 3")
    # A compiled-UT run whose target diverged is recorded too, not retrained.
    self.assertTrue(np.isnan(got[bad_compiled]["eval_accuracy"]))
    self.assertEqual(
        got[bad_compiled]["diverged"],
        "its target diverged: " + got[bad_target]["diverged"],
    )
    self.assertFalse(
        os.path.exists(os.path.join(tmp, "runs", bad_compiled, "target"))
    )
    with open(os.path.join(tmp, "table.json")) as f:
      rows = {(r["kind"], r["lr"]): r for r in json.load(f)["rows"]}
    self.assertTrue(np.isnan(rows["random", 1e30]["accuracy_mean"]))
    self.assertTrue(np.isnan(rows["compiled_sparse", 1e30]["accuracy_mean"]))
    healthy = [
        r for (kind, lr), r in rows.items() if kind == "trained" and lr < 1
    ]
    self.assertTrue(np.isfinite(healthy[0]["accuracy_mean"]))

  @pytest.mark.slow
  def test_a_diverged_run_in_a_vmapped_group_is_recorded(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "diverges_in_group", "--batching=vmap")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    (bad, _), (good, good_config) = sweep.collect_runs(
        sweep_config, "diverges_in_group"
    )
    with open(os.path.join(tmp, "runs", bad, "metrics.json")) as f:
      got = json.load(f)
    self.assertTrue(np.isnan(got["eval_accuracy"]))
    self.assertRegex(
        got["diverged"], r"loss became nan at step \d+ \(last finite"
    )
    # The other run of the group trained on, as it would alone.
    with open(os.path.join(tmp, "runs", good, "metrics.json")) as f:
      got = json.load(f)
    want = train.train_and_evaluate(good_config, os.path.join(tmp, "single"))
    self.assertEqual(got["eval_accuracy"], want["eval_accuracy"])
    np.testing.assert_allclose(
        got["param_checksum"], want["param_checksum"], rtol=1e-5
    )

  @pytest.mark.slow
  def test_workers_must_be_positive(self):
    proc = run_sweep_cli(
        self.create_tempdir().full_path, 1, "kinds", "--workers=0"
    )
    cli_helpers.assert_one_line_error(self, proc, r"--workers=0; use 1 or more")


@pytest.mark.slow
class MultiHostTest(absltest.TestCase):

  def test_two_processes_give_the_one_process_table(self):
    tmp = self.create_tempdir().full_path
    workdirs = [os.path.join(tmp, f"process_{i}") for i in range(2)]
    logs = [os.path.join(tmp, f"process_{i}.log") for i in range(2)]
    port = free_port()
    commands = [
        sweep_command(
            workdirs[i],
            "--distributed",
            f"--coordinator_address=127.0.0.1:{port}",
            "--num_processes=2",
            f"--process_id={i}",
        )
        for i in range(2)
    ]
    try:
      codes = run_all(commands, logs, devices=2)
    except TimeoutError as e:
      self.fail(f"the two processes hung ({e}):\n{_tails(logs)}")
    self.assertEqual(codes, [0, 0], _tails(logs))
    with open(logs[0]) as f:
      self.assertIn("4 device(s) in 2 process(es)", f.read())

    one = os.path.join(tmp, "one_process")
    log = os.path.join(tmp, "one_process.log")
    self.assertEqual(
        run_all([sweep_command(one)], [log], devices=4), [0], _tails([log])
    )

    # Only process 0 wrote files.
    self.assertFalse(os.path.exists(workdirs[1]), files_under(tmp))
    runs = [name for name, _ in sweep.collect_runs(sweep_config, "hosts")]
    self.assertLen(runs, 5)
    written = [
        f for f in files_under(workdirs[0]) if not f.startswith("jax_cache/")
    ]
    self.assertCountEqual(
        written,
        [f"runs/{n}/metrics.json" for n in runs]
        + ["table.csv", "table.json", "table.md", "curves.png"],
    )

    # The same table, and the same record of every run, as one process gives.
    got, want = (
        read_json(os.path.join(w, "table.json")) for w in (workdirs[0], one)
    )
    self.assertLen(want["rows"], 3)  # random at 2 lrs (one diverges), trained.
    self.assertEqual(got["missing_runs"], [])
    # Everything but the rows' training time, a wall-clock measurement.
    untimed = lambda rows: [
        {k: v for k, v in r.items() if k != "core_minutes"} for r in rows
    ]
    np.testing.assert_equal(untimed(got["rows"]), untimed(want["rows"]))
    with (
        open(os.path.join(workdirs[0], "table.md")) as f,
        open(os.path.join(one, "table.md")) as g,
    ):
      self.assertEqual(f.read(), g.read())
    for name in runs:
      got, want = (
          read_json(os.path.join(w, "runs", name, "metrics.json"))
          for w in (workdirs[0], one)
      )
      np.testing.assert_equal(
          {k: got.get(k) for k in RUN_KEYS},
          {k: want.get(k) for k in RUN_KEYS},
          err_msg=name,
      )
      self.assertEqual(got["config"], want["config"])
    diverged = [
        n
        for n in runs
        if "diverged" in read_json(os.path.join(one, "runs", n, "metrics.json"))
    ]
    self.assertEqual(diverged, [runs[2]])  # The one with lr 1e30.


if __name__ == "__main__":
  absltest.main()
