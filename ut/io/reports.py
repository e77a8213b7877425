"""Writing results safely, with provenance (config, seed, git commit, device)."""

import contextlib
import csv
import datetime
import json
import math
import os
import subprocess
import sys

import jax

from ut.errors import UserError


def git_commit(here=None):
  """The HEAD commit of the repo holding `here` (default: this package), with
  '+dirty' for uncommitted changes outside results/, or 'unknown'."""
  here = here or os.path.dirname(os.path.abspath(__file__))
  try:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=here,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Regenerated results/ files are outputs, not code: they do not count.
    dirty = subprocess.run(
        [
            "git",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ":/",
            ":(exclude,top)results",
        ],
        cwd=here,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return commit + ("+dirty" if dirty else "")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def provenance(config=None):
  """A dict to store beside every result."""
  return {
      "git_commit": git_commit(),
      "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
      "device": str(jax.devices()[0].device_kind),
      "num_devices": jax.device_count(),
      "jax_version": jax.__version__,
      "argv": sys.argv,
      "config": None
      if config is None
      else json.loads(config.to_json_best_effort()),
  }


def refuse_existing(paths, overwrite, flag="--config.overwrite=True"):
  """Raises UserError if any path exists and overwriting was not asked for."""
  if overwrite:
    return
  existing = [p for p in paths if os.path.exists(p)]
  if existing:
    raise UserError(
        f"{existing[0]} already exists; pass {flag} to replace it, "
        f"or choose another path"
    )


def _file_above(path):
  """The nearest existing ancestor of `path` if it is a file (so nothing can be
  made at `path`), else None."""
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  return None if os.path.isdir(parent) else parent


def check_folder(path, flag):
  """Raises UserError unless `path` is a folder or can be made one."""
  if not path:
    raise UserError(f"{flag} is empty; name a folder")
  if os.path.exists(path) and not os.path.isdir(path):
    raise UserError(f"{flag}={path} is a file; use a folder")
  if above := _file_above(path):
    raise UserError(f"{flag}={path}: {above} is a file, not a folder")


def check_output(path, overwrite, flag, inputs=()):
  """Raises UserError unless `path` can take a new file: it is not a folder,
  not one of `inputs`, no ancestor is a file, and it is new or `overwrite`."""
  if os.path.isdir(path):
    raise UserError(f"{path} is a folder; name a file to write")
  if any(
      os.path.exists(i) and os.path.samefile(i, path)
      for i in inputs
      if os.path.exists(path)
  ):
    raise UserError(f"{path} is also an input; choose another output path")
  if above := _file_above(path):
    raise UserError(f"{above} is a file, so {path} cannot be written under it")
  refuse_existing([path], overwrite, flag=flag)


@contextlib.contextmanager
def _atomic(path):
  """A file opened for writing at path + '.tmp', renamed to `path` once written
  whole (removed if writing fails): readers never see a part of it."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  try:
    with open(tmp, "w", newline="") as f:
      yield f
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def write_json(path, obj):
  """Writes JSON atomically."""
  with _atomic(path) as f:
    json.dump(obj, f, indent=2, default=_jsonable)
    f.write("\n")


def write_csv(path, rows):
  """Writes a list of flat dicts as CSV atomically."""
  with _atomic(path) as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def write_text(path, text):
  """Writes text (a markdown table, say) atomically."""
  with _atomic(path) as f:
    f.write(text)


def write_markdown(path, *blocks):
  """Writes the non-empty blocks (a table, a note under it) atomically, a
  blank line between them."""
  write_text(path, "\n\n".join(b for b in blocks if b) + "\n")


def format_table(rows, floatfmt="{:.3g}"):
  """A plain-text table of flat dicts for the terminal (and markdown)."""
  cols = list(rows[0])
  cell = lambda v: floatfmt.format(v) if isinstance(v, float) else str(v)
  cells = [[cell(r[c]) for c in cols] for r in rows]
  widths = [
      max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)
  ]
  line = (
      lambda vals: "| "
      + " | ".join(v.rjust(w) for v, w in zip(vals, widths))
      + " |"
  )
  sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
  return "\n".join([line(cols), sep] + [line(r) for r in cells])


def output_finished(path):
  """Whether a command's output marks it finished: it exists, and if it is a
  JSON report that lists pending rows (launch.learnability's, partly done),
  none are left."""
  if not os.path.exists(path):
    return False
  if not path.endswith(".json"):
    return True
  with open(path) as f:
    return not json.load(f).get("pending")


def mean_std(mean, std):
  """Accuracies as a table cell in percent: "98.65 ± 1.68"; the mean alone
  where std is None or NaN (one seed); "" where the mean is (no runs)."""
  missing = lambda x: x is None or math.isnan(x)
  if missing(mean):
    return ""
  return f"{100 * mean:.2f}" + ("" if missing(std) else f" ± {100 * std:.2f}")


def step(value):
  """A step count for a table cell: "" for None (never reached)."""
  return "" if value is None else f"{value:.0f}"


def _jsonable(o):
  if hasattr(o, "tolist"):
    return o.tolist()
  if hasattr(o, "item"):
    return o.item()
  return str(o)
