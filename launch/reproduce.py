"""Regenerates every table and figure: see configs/reproduce.py."""

import os
import subprocess
import sys
import time

from absl import flags
from absl import logging
from ml_collections import config_flags

from launch import cli
from ut import reports
from ut.errors import UserError

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/reproduce.py:full",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Results folder, one subfolder per step.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False,
                               "Replace an earlier reproduce.json in the workdir.")


def step_command(step, workdir, workers):
  out = os.path.join(workdir, step.name)
  flags_ = [f.format(workers=workers) for f in step.flags]
  return [sys.executable, "-m", step.module, f"--config={step.config}",
          f"--workdir={out}", *flags_]


def main(argv):
  del argv
  config, workdir = _CONFIG.value, _WORKDIR.value
  report_path = os.path.join(workdir, "reproduce.json")
  reports.refuse_existing([report_path], _OVERWRITE.value, flag="--overwrite")
  started = time.time()
  done = []
  for step in config.steps:
    cmd = step_command(step, workdir, config.workers)
    shown = " ".join(["python"] + cmd[1:])
    if step.output and os.path.exists(os.path.join(workdir, step.name, step.output)):
      logging.info("[%s] skipped: %s/%s/%s exists", step.name, workdir, step.name,
                   step.output)
      done.append(dict(name=step.name, command=shown, seconds=None, skipped=True))
      continue
    logging.info("[%s] %s", step.name, shown)
    start = time.time()
    code = subprocess.run(cmd, check=False).returncode
    if code:
      raise UserError(f"step {step.name} exited with {code}: {shown}; finished "
                      f"steps and runs are kept, rerun to resume")
    done.append(dict(name=step.name, command=shown, seconds=time.time() - start,
                     skipped=False))
    logging.info("[%s] done in %.0fs", step.name, done[-1]["seconds"])
  total = time.time() - started
  reports.write_json(report_path, dict(
      profile=config.profile, steps=done, wall_seconds=total,
      provenance=reports.provenance(config)))
  for s in done:
    secs = "skipped" if s["skipped"] else f"{s['seconds']:.0f}s"
    print(f"{s['name']:>14}  {secs:>8}  {s['command']}")
  print(f"total {total / 60:.1f} min; wrote {workdir}/reproduce.json")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(main)
