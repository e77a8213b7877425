"""Multi-host sweeps: two JAX processes on this machine stand in for two hosts.

Each process has 2 CPU devices, process 0 runs the coordinator on 127.0.0.1,
and the processes exchange data through gloo. The sweep's groups are sharded
over the 4 global devices; the table must equal that of one process with 4
devices, and only process 0 may write files (each process gets its own
--workdir here, so anything process 1 wrote would show).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

from absl.testing import absltest
import numpy as np
import pytest

from tests import sweep_config
from ut.experiments import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tests", "sweep_config.py") + ":hosts"
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
      f"--config={CONFIG}",
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


def _tails(logs):
  out = []
  for log in logs:
    with open(log) as f:
      out.append(f"--- {os.path.basename(log)}\n{f.read()[-3000:]}")
  return "\n".join(out)


if __name__ == "__main__":
  absltest.main()
