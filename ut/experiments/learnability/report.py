"""The learnability report: learnability.{json,md,png} from the rows finished
so far, and whether an existing report may be replaced or continued."""

import json
import os

import numpy as np

from ut.errors import UserError
from ut.experiments.learnability import runs as runs_lib
from ut.experiments.sweep import tables
from ut.io import plots
from ut.io import reports


def _write_report(config, workdir, paths, head, order, rows, runs, gflops):
  """learnability.{json,md,png} from the rows finished so far (in the
  table's order); the others are listed as pending."""
  pending = [(c, n) for c, n in order if (c, n) not in rows]
  name = lambda c, n: f"{c} {runs_lib.start_name(n)}"
  # Pending rows some of whose seeds have finished: {row: seeds finished}.
  done = {
      name(c, n): sum(
          runs_lib._finished(workdir, c, n, s) for s in config.seeds
      )
      for c, n in pending
  }
  result = dict(
      **head,
      rows=[rows[o] for o in order if o in rows],
      pending=[name(c, n) for c, n in pending] or None,
      pending_seeds_done={row: k for row, k in done.items() if k},
      per_run=runs,
      dot_gflops=gflops,
      provenance=reports.provenance(config),
  )
  reports.write_json(paths[0], result)
  reports.write_text(paths[1], markdown(result))
  plots.learnability(result).savefig(
      os.path.join(workdir, "learnability.png"), dpi=120
  )
  return result


def _check_continuation(report, config, paths):
  """A UserError unless the report may be written: there is none yet, or
  config.overwrite, or it lists pending rows of this same configuration (a
  continuation; `overwrite` and `report_only` aside)."""
  if config.overwrite or not report:
    return
  saved = dict((report.get("provenance") or {}).get("config") or {})
  now = json.loads(config.to_json_best_effort())
  for field in ("overwrite", "report_only"):  # How to write, not what.
    saved.pop(field, None)
    now.pop(field, None)
  if report.get("pending") is None:
    reports.refuse_existing(paths, config.overwrite)
  if saved != now:
    raise UserError(
        f"{paths[0]} holds an unfinished run of another configuration; run "
        "that configuration again to continue it, or pass "
        "--config.overwrite=True to replace the report (finished runs are "
        "kept)"
    )


def _read_if_exists(path):
  """A report's JSON, or {} where there is none yet."""
  return runs_lib._read(path) if os.path.exists(path) else {}


def _row(construction, ut_spec, noise, results):
  test = np.array([r["test_accuracy"] for r in results])
  start = np.array([r["start_accuracy"] for r in results])
  wins = [r for r in results if r["test_accuracy"] >= tables.SUCCESS]
  first = [r["steps_to_99"] for r in wins if r.get("steps_to_99") is not None]
  return dict(
      ut=construction,
      m=ut_spec.model_width,
      start=runs_lib.start_name(noise),
      noise=noise,
      seeds=len(results),
      start_mean=float(start.mean()),
      test_mean=float(test.mean()),
      test_std=tables.std(test),
      successes=len(wins),
      median_steps_to_99=float(np.median(first)) if first else None,
      max_steps=max(r["step"] for r in results),
      # On the CPU; runs trained on an accelerator count apart.
      **tables.device_minutes(
          [(r, r["train_minutes"]) for r in results], "train_minutes"
      ),
      runs=";".join(r["name"] for r in results),
  )


def markdown(result):
  t = result["target"]
  lines = [
      f"Target: trained attention-only, d={t['width']}, H={t['heads']}, "
      f"L={t['layers']}, head width {t['head_width']}; test accuracy "
      f"{100 * t['test_accuracy']:.2f}% (step {t['step']}).",
      "",
      "Compiled programs, no gradient step (test set of the target):",
      "",
      reports.format_table(
          [dict(ut=k, **v) for k, v in result["programs"].items()],
          floatfmt="{:.5g}",
      ),
      "",
      "Training E and U from a random start or from the compiled program "
      "plus noise (accuracies in %, test set of each run's seed):",
      "",
  ]
  table = []
  for r in result["rows"]:
    table.append(
        dict(
            ut=r["ut"],
            m=r["m"],
            start=r["start"],
            seeds=r["seeds"],
            start_acc=f"{100 * r['start_mean']:.1f}",
            test=reports.mean_std(r["test_mean"], r["test_std"]),
            **{"≥99%": f"{r['successes']}/{r['seeds']}"},
            median_step_to_99=reports.step(r["median_steps_to_99"]),
            max_steps=r["max_steps"],
            core_minutes=r["train_minutes"],
            **(
                {"on an accelerator": r["accelerator_runs"]}
                if any(x.get("accelerator_runs") for x in result["rows"])
                else {}
            ),
        )
    )
  lines.append(reports.format_table(table, floatfmt="{:.3g}"))
  if result.get("pending"):
    done = result.get("pending_seeds_done") or {}
    names = [
        f"{p} ({done[p]} seed{'s' * (done[p] > 1)} finished)"
        if p in done
        else p
        for p in result["pending"]
    ]
    lines += ["", f"Pending (not all seeds run yet): {', '.join(names)}."]
  total = sum(r["train_minutes"] for r in result["rows"])
  lines += [
      "",
      f"Training: {total:.0f} core-minutes in all (each run on one core; "
      f"its training steps, from its log). 2048^2 float32 matmul when this "
      f"command ran: {result['dot_gflops']:.0f} GFLOP/s.",
  ]
  gpu_runs = sum(r.get("accelerator_runs", 0) for r in result["rows"])
  if gpu_runs:
    names = {
        n for r in result["rows"] for n in r["accelerators"].split(";") if n
    }
    minutes = sum(r["accelerator_minutes"] for r in result["rows"])
    lines[-1] = lines[-1].replace(
        "core-minutes in all", "core-minutes on the CPU"
    ) + (
        f" {gpu_runs} run{'s' * (gpu_runs != 1)} trained on"
        f" {' and '.join(sorted(names))} instead (column 'on an"
        f" accelerator'): {minutes:.0f} minutes of their training steps"
        " (the accelerator may have been shared with other processes)."
    )
  return "\n".join(lines) + "\n"
