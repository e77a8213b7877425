"""What a training workdir records besides its checkpoints.

config.json (the run's config; a resume must have the same one, host
settings aside: `check_workdir_config`), train_metrics.csv and
eval_metrics.csv (`CsvLog`, cut back to the restored step on a resume) and
TensorBoard events (`summary_writer`, `scalars`).
"""

import json
import os

import ml_collections
import numpy as np

from ut.errors import UserError
from ut.io import reports

# Sections of host settings (configs/cpu.py), not of the run: a run resumes,
# or is evaluated, on any host.
HOST_SECTIONS = ("cpu",)


def stored_config(config_dict: dict) -> dict:
  """A config read back from a run's JSON, without the host settings
  (HOST_SECTIONS): the part a resume must match."""
  out = json.loads(json.dumps(config_dict))
  for section in HOST_SECTIONS:
    out.pop(section, None)
  return out


def config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
  """Dotted names of the fields where two config dicts differ."""
  out = []
  for key in sorted(set(a) | set(b)):
    x, y = a.get(key), b.get(key)
    if isinstance(x, dict) and isinstance(y, dict):
      out += config_diff(x, y, f"{prefix}{key}.")
    elif x != y:
      out.append(prefix + key)
  return out


def check_workdir_config(config, workdir: str) -> None:
  """Writes config.json, or checks that a resumed run has the same config."""
  path = os.path.join(workdir, "config.json")
  current = json.loads(config.to_json_best_effort())
  # Always recorded, so that a run's implementation can be read from its
  # record, even from a config built by hand.
  current.setdefault("model", {}).setdefault("impl", "auto")
  if os.path.exists(path):
    with open(path) as f:
      raw = json.load(f)
    stored = stored_config(raw)
    run = stored_config(current)  # Host settings may differ.
    if stored != run:
      raise UserError(
          f"workdir {workdir} holds a run with a different config "
          f"(differs in {', '.join(config_diff(stored, run))}); "
          f"use a new --workdir to start afresh, or the same config "
          f"to resume"
      )
  else:
    reports.write_json(path, current)


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The ConfigDict a workdir was trained with."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise UserError(
        f"{workdir} has no config.json: is it a training workdir "
        f"(python -m launch.train --workdir=...)?"
    )
  with open(path) as f:
    raw = json.load(f)
  return ml_collections.ConfigDict(stored_config(raw))


class CsvLog:
  """Appends metric rows; on resume keeps only rows up to the restored step."""

  def __init__(self, path, keep_through_step):
    self.path = path
    rows = []
    if os.path.exists(path):
      with open(path) as f:
        header, *lines = f.read().splitlines()
      rows = [l for l in lines if int(l.split(",")[0]) <= keep_through_step]
      with open(path, "w") as f:
        f.write("\n".join([header] + rows) + "\n")
    self.header_written = os.path.exists(path)
    self.rows = [dict(zip(header.split(","), r.split(","))) for r in rows]
    # The loss of the last kept row (for a resume with no steps left to run).
    self.last_loss = float(self.rows[-1]["loss"]) if self.rows else None

  def curve(self, column="accuracy"):
    """[(step, value of column)] of the kept rows that have it (an eval log's
    held-out curve; column="test_accuracy": its test curve, or [])."""
    return [
        (int(r["step"]), float(r[column])) for r in self.rows if r.get(column)
    ]

  def write(self, row):
    with open(self.path, "a") as f:
      if not self.header_written:
        f.write(",".join(row) + "\n")
        self.header_written = True
      f.write(",".join(_fmt(v) for v in row.values()) + "\n")


def _fmt(v):
  return repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)


def summary_writer(workdir: str):
  """TensorBoard events under workdir/tb (None without tensorboardX)."""
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  except ImportError:  # pragma: no cover - tensorboardX is a dependency.
    return None
  return SummaryWriter(os.path.join(workdir, "tb"))


def scalars(writer, prefix: str, row: dict) -> None:
  """row's values but its step as TensorBoard scalars prefix/key."""
  if writer is None:
    return
  for key, value in row.items():
    if key != "step":
      writer.add_scalar(f"{prefix}/{key}", value, row["step"])
  writer.flush()
