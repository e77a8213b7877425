"""results/README.md: what each results folder holds, and in what state.

`write_index(config, root)` reads only the folders' files (configs/reproduce.py
names the steps): for each step its folder, what it holds, its command, the
commit and JAX version its files record, and its state. A sweep's state counts
its recorded runs against the runs its config plans now; another step is
complete once its output file is (`reports.output_finished`). Where
root/reproduce.json records a step's wall time (a regeneration ran there), the
index shows it, with the machine's 2048^2 matmul rate when the step started.
"""

import json
import os

import ml_collections

from ut.experiments.sweep import plan
from ut.experiments.sweep import records
from ut.io import reports

HEADER = (
    "# results/\n\n"
    "One folder per table or figure, its selection sweeps inside it. Written "
    "by `python -m launch.reproduce --workdir={root} --index_only` (and after "
    "every step of a regeneration); commit and JAX are those the folder's "
    "files record (`+dirty`: uncommitted changes then). Earlier folders left "
    "`results/` at commit a38a18a; docs/history.md cites them there.\n\n"
)


def command(step: ml_collections.ConfigDict, root: str, workers: int) -> list[str]:
  """The step's command line after `python`: `-m module --config=... <out>`."""
  config = [f"--config={step.config}"] if step.config else []
  out = os.path.join(root, step.workdir)
  flags = [f.format(workers=workers, root=root) for f in step.flags]
  return ["-m", step.module, *config, f"{step.out_flag}={out}", *flags]


def _provenance(path: str) -> dict:
  if not path.endswith(".json") or not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f).get("provenance") or {}


def _short(commit: str | None) -> str:
  if not commit:
    return ""
  sha, dirty = commit.partition("+")[::2]
  return sha[:7] + ("+" + dirty if dirty else "")


def sweep_state(config_path: str, workdir: str) -> tuple[str, dict]:
  """(state, provenance of table.json) of a sweep folder."""
  module = plan.load_config_module(config_path)
  runs = plan.collect_runs(module, plan.config_arg(config_path), workdir)
  done = sum(records.recorded_metrics(workdir, n) is not None for n, _ in runs)
  table = os.path.join(workdir, "table.json")
  if not os.path.isdir(workdir):
    state = "not run"
  elif done == len(runs) and os.path.exists(table):
    state = f"complete: {done} runs"
  else:
    state = f"{done} of {len(runs)} runs recorded"
  return state, _provenance(table)


def step_state(step: ml_collections.ConfigDict, root: str) -> tuple[str, dict]:
  """(state, provenance) of one step's folder."""
  workdir = os.path.join(root, step.workdir)
  if step.output is None:
    return sweep_state(step.config, workdir)
  path = os.path.join(workdir, step.output)
  if reports.output_finished(path):
    state = "complete"
  else:
    state = "partial" if os.path.exists(path) else "not run"
  return state, _provenance(path)


def _timed(root: str) -> dict:
  """{step name: its record} from root/reproduce.json, if any."""
  path = os.path.join(root, "reproduce.json")
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return {s["name"]: s for s in json.load(f)["steps"]}


def _minutes(record: dict | None) -> str:
  if not record or record.get("seconds") is None:
    return ""
  rate = record.get("dot_gflops")
  at = f" at {rate:.0f} GFLOP/s" if rate else ""
  return f"{record['seconds'] / 60:.1f}{at}"


def rows(config: ml_collections.ConfigDict, root: str) -> list[dict]:
  out = []
  timed = _timed(root)
  for step in config.steps:
    state, prov = step_state(step, root)
    out.append(
        dict(
            folder=f"`{step.workdir}`",
            holds=step.about,
            command="`python " + " ".join(command(step, root, config.workers))
            + "`",
            commit=_short(prov.get("git_commit")),
            jax=prov.get("jax_version", ""),
            state=state,
            minutes=_minutes(timed.get(step.name)),
        )
    )
  for other in config.get("others", ()):
    out.append(
        dict(
            folder=f"`{other.folder}`",
            holds=other.about,
            command=f"`{other.command}`",
            commit="",
            jax="",
            state="by hand",
            minutes="",
        )
    )
  return out


def write_index(config: ml_collections.ConfigDict, root: str) -> str:
  """Writes root/README.md; returns its text."""
  table = _markdown(rows(config, root))
  text = HEADER.format(root=root) + table + "\n"
  reports.write_text(os.path.join(root, "README.md"), text)
  return text


def _markdown(rows_: list[dict]) -> str:
  cols = list(rows_[0])
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  lines += ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows_]
  return "\n".join(lines)
