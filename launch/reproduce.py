"""Regenerates every table and figure: see configs/reproduce.py.

Before each step it times a 2048^2 float32 dot (`ut.io.roofline`) and records its
rate beside the step's wall time: the same 2-core CPU runs at very different
speeds on different days, and a time means little without it.
"""

import json
import os
import signal
import subprocess
import sys
import time

from absl import flags
from absl import logging
from ml_collections import config_flags

from configs import reproduce as reproduce_config
from launch import cli
from ut.errors import UserError
from ut.experiments import index
from ut.io import reports
from ut.io import roofline

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "configs/reproduce.py:<profile> (default: full).",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Results folder, one subfolder per step."
)
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace a finished regeneration's reproduce.json."
)
_INDEX_ONLY = flags.DEFINE_bool(
    "index_only",
    False,
    "Only rewrite <workdir>/README.md from the folders' files; run nothing.",
)


def step_command(step, workdir, workers):
  return [sys.executable, *index.command(step, workdir, workers)]


def _earlier(report_path, overwrite):
  """Step records of an interrupted regeneration (to resume), or {}."""
  if not os.path.exists(report_path):
    return {}
  with open(report_path) as f:
    report = json.load(f)
  if report.get("complete"):
    reports.refuse_existing([report_path], overwrite, flag="--overwrite")
    return {}
  return {s["name"]: s for s in report["steps"]}


def _write(workdir, config, steps, complete):
  """reproduce.json and the index README.md: written after every step;
  returns the steps' table (minutes and machine speed) for the terminal."""
  total = sum(s["seconds"] or 0.0 for s in steps)
  reports.write_json(
      os.path.join(workdir, "reproduce.json"),
      dict(
          profile=config.profile,
          complete=complete,
          steps=steps,
          wall_seconds=total,
          provenance=reports.provenance(config),
      ),
  )
  rows = [
      dict(
          step=s["name"],
          minutes="skipped"
          if s["seconds"] is None
          else f"{s['seconds'] / 60:.1f}",
          dot_gflops=_gflops(s.get("dot_gflops")),
          command=s["command"],
      )
      for s in steps
  ]
  rates = [s["dot_gflops"] for s in steps if s.get("dot_gflops")]
  rows.append(
      dict(
          step="total" if complete else "total so far",
          minutes=f"{total / 60:.1f}",
          dot_gflops=_gflops(min(rates, default=None))
          + ("-" + _gflops(max(rates)) if len(rates) > 1 else ""),
          command="",
      )
  )
  index.write_index(config, workdir)
  return reports.format_table(rows)


def _gflops(rate):
  return "" if rate is None else f"{rate:.0f}"


def _stop(proc, own_s=5, grace_s=60):
  """Stops a step still running because this process was interrupted.

  The step has `own_s` to exit by itself (Ctrl-C reaches the whole process
  group), then gets SIGTERM, which a sweep passes on to its workers, then
  SIGKILL after `grace_s` more.
  """
  for stop, wait_s in (
      (None, own_s),
      (proc.terminate, grace_s),
      (proc.kill, None),
  ):
    if stop:
      stop()
    try:
      proc.wait(timeout=wait_s)
      return
    except subprocess.TimeoutExpired:
      pass


def main(argv):
  del argv
  # SIGTERM (`kill`, a scheduler, a shutdown) unwinds like Ctrl-C, through the
  # `finally` that records the interrupted step's time.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
  config = _CONFIG.value or reproduce_config.get_config("full")
  workdir = _WORKDIR.value
  if _INDEX_ONLY.value:
    index.write_index(config, workdir)
    print(f"wrote {workdir}/README.md")
    return
  earlier = _earlier(os.path.join(workdir, "reproduce.json"), _OVERWRITE.value)
  steps = []
  dot = roofline.make()
  for step in config.steps:
    cmd = step_command(step, workdir, config.workers)
    shown = " ".join(["python"] + cmd[1:])
    record = earlier.get(step.name)
    if record and record.get("finished"):
      logging.info("[%s] finished in an earlier invocation", step.name)
      steps.append(record)
      continue
    if step.output and reports.output_finished(
        os.path.join(workdir, step.workdir, step.output)
    ):
      logging.info(
          "[%s] skipped: %s/%s/%s exists",
          step.name,
          workdir,
          step.workdir,
          step.output,
      )
      steps.append(
          dict(name=step.name, command=shown, seconds=None, finished=True)
      )
      continue
    rate = roofline.rate(dot)[0] / 1e9
    logging.info("[%s] %s (2048^2 dot: %.0f GFLOP/s)", step.name, shown, rate)
    start = time.time()
    code = None
    proc = subprocess.Popen(cmd)
    try:
      code = proc.wait()
    finally:  # Also on Ctrl-C or SIGTERM: the step's time so far counts when resumed.
      _stop(proc)
      seconds = time.time() - start + (record or {}).get("seconds", 0.0)
      steps.append(
          dict(
              name=step.name,
              command=shown,
              seconds=seconds,
              finished=code == 0,
              dot_gflops=rate,
          )
      )
      _write(workdir, config, steps, complete=False)
    if code:
      raise UserError(
          f"step {step.name} exited with {code}: {shown}; finished "
          f"steps and runs are kept, rerun to resume"
      )
    logging.info("[%s] done in %.0fs", step.name, seconds)
  print(_write(workdir, config, steps, complete=True))
  print(f"wrote {workdir}/reproduce.json and README.md")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(main)
