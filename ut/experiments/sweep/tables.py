"""A sweep's tables: its recorded runs aggregated by cell, as markdown, and
the rows that plots read.

One row per cell (the runs that differ only in their seeds), with mean ± std
(ddof=1) over seeds; `write_table` writes workdir/table.{csv,json,md}, and
`finished_rows` reads a table back for a sub-grid of its sweep.
"""

import csv
import json
import math
import os

import numpy as np

from ut.experiments.sweep import plan
from ut.experiments.sweep import records
from ut.io import reports
from ut.training import records as records_lib

SUCCESS = 0.99  # A run succeeds when its final held-out accuracy reaches this.


def aggregate(workdir: str, names: list[str]) -> list[dict]:
  """One row per cell: the runs that differ only in their seeds (`seed`, and
  `model.ut_seed`: a random UT's draw is one more seed of the cell).

  Mean ± std (ddof=1) of the validation (eval_accuracy) and, where the runs
  have one, the test accuracy; how many runs end at >= SUCCESS on validation,
  and the median step at which those first reached it (`steps_to_99`). Where
  every run scored the test set at each evaluation (config.eval.test_each),
  also mean ± std of its test accuracy at its best validation
  (`test_at_best_valid`): test_best_mean and test_best_std.
  """
  cells = {}
  for name in names:
    with open(records.metrics_path(workdir, name)) as f:
      r = json.load(f)
    cfg = records_lib.stored_config(r["config"])
    cfg.pop("seed", None)
    cfg.get("model", {}).pop("ut_seed", None)
    key = json.dumps(cfg, sort_keys=True)
    cells.setdefault(key, []).append(r)
  return [_row(workdir, results) for results in cells.values()]


def _row(workdir, results):
  """The table row of one cell's recorded runs (`aggregate`)."""
  acc = np.array([r["eval_accuracy"] for r in results])
  test = np.array([r.get("test_accuracy", math.nan) for r in results])
  wins = [r for r in results if r["eval_accuracy"] >= SUCCESS]
  first = [r["steps_to_99"] for r in wins if r.get("steps_to_99")]
  c = results[0]["config"]
  trained = [r for r in results if not r["config"].get("compiled")]
  return dict(
      task=results[0]["task"],
      kind=results[0]["kind"],
      variant=results[0]["variant"],
      width=results[0].get("model_width"),
      data=json.dumps(c.get("data", {}), sort_keys=True),
      lr=c["train"]["lr"],
      seeds=len(results),
      accuracy_mean=float(acc.mean()),
      accuracy_std=std(acc),
      test_mean=float(test.mean()),
      test_std=std(test),
      successes=len(wins),
      median_steps_to_99=float(np.median(first)) if first else None,
      max_steps=max(r.get("step", 0) for r in results),
      cap=c["train"]["steps"],  # The step cap of the cell's runs.
      # Compiled-UT rows: the lowest share of predictions equal to the target's.
      agreement_min=min(
          (r["agreement"] for r in results if "agreement" in r),
          default=None,
      ),
      # Compiled-UT runs train nothing (their target's time is its own
      # row's).
      trained_runs=len(trained),
      # Runs of a resumed group: their seconds count from the resume.
      resumed_runs=sum("resumed_at_step" in r for r in trained),
      **_test_at_best(results),
      **device_minutes(
          [(r, _run_minutes(workdir, r)) for r in trained], "core_minutes"
      ),
      runs=";".join(sorted(r["name"] for r in results)),
  )


def finished_rows(config_path: str, workdir: str) -> list[dict] | None:
  """workdir/table.json's rows when it covers every run of the sweep, else None.

  Only the rows of this sweep's runs are returned, so a table made by a larger
  sweep serves a sub-grid; a cell of which the sub-grid has fewer seeds is
  aggregated again from those runs' files. Reads only; call sweep.run_sweep
  when this is None.
  """
  path = os.path.join(workdir, "table.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    rows = json.load(f)["rows"]
  module = plan.load_config_module(config_path)
  runs = plan.collect_runs(module, plan.config_arg(config_path), workdir)
  wanted = {name for name, _ in runs}
  done = {name for r in rows for name in r["runs"].split(";")}
  if not wanted <= done:
    return None
  out = []
  for row in rows:
    names = row["runs"].split(";")
    mine = [n for n in names if n in wanted]
    if len(mine) == len(names):
      out.append(row)
    elif mine:
      out.extend(aggregate(workdir, mine))
  return out


def total_seconds(workdir: str, names: list[str]) -> float | None:
  """Training time of the finished runs (as recorded; None where unrecorded)."""
  total = 0.0
  for name in names:
    with open(records.metrics_path(workdir, name)) as f:
      seconds = json.load(f).get("run_seconds")
    if seconds is None:
      return None
    total += seconds
  return total


def train_minutes(run_dir: str) -> float:
  """Minutes the run's training steps took, from its train_metrics.csv
  (steps between log rows over each row's steps_per_sec; not counting
  evaluation and compilation)."""
  path = os.path.join(run_dir, "train_metrics.csv")
  if not os.path.exists(path):
    return math.nan
  with open(path) as f:
    rows = list(csv.DictReader(f))
  seconds, last = 0.0, 0
  for row in rows:
    step = int(row["step"])
    seconds += (step - last) / float(row["steps_per_sec"])
    last = step
  return seconds / 60


def _run_minutes(workdir, metrics):
  """A recorded run's training time: its steps' time from its log
  (`train_minutes`), or, for a run of a vmapped group (no log of its own),
  its share of the group's seconds."""
  minutes = train_minutes(records.run_dir(workdir, metrics["name"]))
  if math.isnan(minutes):
    return metrics.get("run_seconds", math.nan) / 60
  return minutes


def device_minutes(runs: list[tuple[dict, float]], cpu_key: str) -> dict:
  """The minutes of [(metrics, minutes)] runs by where they trained:
  {cpu_key: on the CPU, accelerator_runs, accelerator_minutes, accelerators
  (their device names, ';'-joined)}."""
  apart = [(r, m) for r, m in runs if not on_cpu(r)]
  return {
      cpu_key: float(sum(m for r, m in runs if on_cpu(r))),
      "accelerator_runs": len(apart),
      "accelerator_minutes": float(sum(m for _, m in apart)),
      "accelerators": ";".join(
          sorted({r["provenance"]["device"] for r, _ in apart})
      ),
  }


def on_cpu(metrics: dict) -> bool:
  """Whether a recorded run trained on a CPU (runs recorded before the
  device was, did)."""
  return (metrics.get("provenance") or {}).get("device", "cpu") == "cpu"


def cost_note(rows: list[dict], dot_gflops: float) -> str:
  """One line: the table's CPU training time in core-hours (each row's
  `core_minutes`) beside the machine's matmul speed (GFLOP/s), the minutes
  of the runs trained on an accelerator, and how many runs were resumed
  (their time counts from the resume), if any."""
  gpu_runs = sum(r.get("accelerator_runs", 0) for r in rows)
  resumed = sum(r.get("resumed_runs", 0) for r in rows)
  runs = sum(r["trained_runs"] for r in rows) - gpu_runs
  hours = sum(r["core_minutes"] for r in rows) / 60
  note = (
      f"Training: {hours:.1f} core-hours over {runs} runs trained on the CPU "
      f"(each run's training steps, from its log; evaluation and compilation "
      f"not counted). 2048^2 float32 matmul when this table was written: "
      f"{dot_gflops:.0f} GFLOP/s."
  )
  if gpu_runs:
    names = sorted(
        {n for r in rows for n in (r.get("accelerators") or "").split(";")}
        - {""}
    )
    minutes = sum(r["accelerator_minutes"] for r in rows)
    note += (
        f" {gpu_runs} run{'s' * (gpu_runs != 1)} trained on"
        f" {' and '.join(names)}: {minutes:.0f} minutes of training steps (a"
        " vmapped group's: its wall time shared among its runs; the"
        " accelerator may have been shared with other processes)."
    )
  if resumed:
    note += (
        f" {resumed} run{'s' * (resumed != 1)} of resumed vmapped groups"
        " count only their time after the resume."
    )
  return note


def std(values: np.ndarray) -> float:
  """The sample std (ddof=1), nan for one value."""
  return float(values.std(ddof=1)) if len(values) > 1 else math.nan


def write_table(workdir: str, rows: list[dict], meta: dict) -> None:
  reports.write_csv(os.path.join(workdir, "table.csv"), rows)
  reports.write_json(
      os.path.join(workdir, "table.json"), dict(rows=rows, **meta)
  )
  reports.write_text(
      os.path.join(workdir, "table.md"), markdown_table(rows) + "\n"
  )


def unfinished_runs(workdir: str) -> list[tuple[str, dict, list]]:
  """[(name, config, curve)] for the runs of the last aggregate that are not
  finished (table.json's missing_runs): each run's stored config.json ({}
  where it has none yet) and its validation curve [(step, accuracy)] from its
  eval_metrics.csv ([] before its first evaluation)."""
  path = os.path.join(workdir, "table.json")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    missing = json.load(f).get("missing_runs") or []
  out = []
  for name in missing:
    run_dir = records.run_dir(workdir, name)
    config, curve = {}, []
    if os.path.exists(os.path.join(run_dir, "config.json")):
      with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    if os.path.exists(os.path.join(run_dir, "eval_metrics.csv")):
      with open(os.path.join(run_dir, "eval_metrics.csv")) as f:
        curve = [
            (int(r["step"]), float(r["accuracy"])) for r in csv.DictReader(f)
        ]
    out.append((name, config, curve))
  return out


def unfinished_note(workdir: str) -> str:
  """One line naming the runs of the last aggregate that are not finished
  (`unfinished_runs`), each with its latest evaluation, or "" where every
  run finished."""
  parts = []
  for name, config, curve in unfinished_runs(workdir):
    if not curve:
      parts.append(f"{name}: not started")
      continue
    cap = f" of {config['train']['steps']}" if config else ""
    step, accuracy = curve[-1]
    parts.append(
        f"{name}: step {step}{cap}, {100 * accuracy:.2f}% on validation"
    )
  if not parts:
    return ""
  if len(parts) == 1:
    runs = "1 run; its latest evaluation, and the same command resumes it"
  else:
    runs = (
        f"{len(parts)} runs; their latest evaluation, and the same command"
        " resumes them"
    )
  return (
      f"Not finished, so not in the table ({runs}): " + "; ".join(parts) + "."
  )


def _test_at_best(results):
  """test_best_mean and test_best_std where every run has a
  test_at_best_valid (config.eval.test_each), else nothing."""
  if not all("test_at_best_valid" in r for r in results):
    return {}
  best = np.array([r["test_at_best_valid"]["test_accuracy"] for r in results])
  return dict(test_best_mean=float(best.mean()), test_best_std=std(best))


def markdown_table(rows: list[dict]) -> str:
  # Wall time (core_minutes) goes to paper.md's cost line, not the table.
  shown = [
      {k: v for k, v in r.items() if k not in ("runs", "core_minutes")}
      for r in rows
  ]
  for r in shown:
    r["accuracy"] = reports.mean_std(
        r.pop("accuracy_mean"), r.pop("accuracy_std")
    )
    r["test"] = reports.mean_std(r.pop("test_mean"), r.pop("test_std"))
    if "test_best_mean" in r:
      r["test at best valid"] = reports.mean_std(
          r.pop("test_best_mean"), r.pop("test_best_std")
      )
    r[f"≥{100 * SUCCESS:.0f}%"] = f"{r.pop('successes')}/{r['seeds']}"
    r["median step to 99%"] = reports.step(r.pop("median_steps_to_99"))
    agreement = r.pop("agreement_min")
    r["agreement (min)"] = "" if agreement is None else f"{100 * agreement:.2f}"
  if any("test at best valid" in r for r in shown):
    for r in shown:
      r.setdefault("test at best valid", "")
  return reports.format_table(shown)
