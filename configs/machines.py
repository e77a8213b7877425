r"""Seeds over machines: is the spread between random UTs (draws) larger than
the spread between programs (E, U initialisations) on one UT?

  python -m launch.sweep --config=configs/machines.py --workdir=results/machines
  python -m launch.sweep --config=configs/machines.py:smoke --workdir=/tmp/m  # CI size

Two cells (issue 17): Dyck attention-only (za) and k-hop with res_ln at k = 2,
each the random UT of its table (m = 256) with its table's config
(configs/dyck_table.py, configs/khop_table.py: the task's protocol and the
hyperparameters chosen on validation seeds; run the selection sweeps first). 3 UT draws (model.ut_seed 0, 1, 2) x 2
program seeds (seed 10, 11: E, U and the data; not the table seeds, so that
the draws here are not the table's runs). The sweep writes machines.md and
machines.json: per cell, the mean, the std of the per-draw means (between
machines) and the mean of the within-draw stds (between programs).
"""

import json
import os

import numpy as np

from configs import common
from configs import dyck_table
from configs import khop_table

# Each cell is its table's config (the table's protocol and the hyperparameters
# its selection sweep chose on validation seeds).
CELLS = {
    "dyck": (dyck_table, "model=random,variant=attn,mix=za"),
    "khop2": (khop_table, "model=random,variant=res_ln,k=2"),
}
UT_SEEDS = (0, 1, 2)
PROGRAM_SEEDS = (10, 11)


def get_config(arg=None):
  cell, _, rest = (arg or "").partition(",")
  name = cell.partition("=")[2]
  if not cell.startswith("cell=") or name not in CELLS:
    raise common.UserError(
        f"machine runs start with cell=NAME; NAME one of {', '.join(CELLS)}"
    )
  module, base = CELLS[name]
  return module.get_config(",".join(filter(None, [base, rest])))


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(cells="khop2+dyck", smoke=False))
  for cell in args["cells"].split("+"):
    if cell not in CELLS:
      raise common.UserError(f"cells={cell!r}; use some of {'+'.join(CELLS)}")
    for ut_seed in UT_SEEDS:
      for seed in PROGRAM_SEEDS:
        add(
            f"cell={cell},seed={seed},ut_seed={ut_seed}"
            + (",smoke" if args["smoke"] else "")
        )


def spread(results):
  """{mean, between_machines, between_programs, per_machine} of runs'
  metrics dicts (each with config.model.ut_seed and eval_accuracy)."""
  by_draw = {}
  for r in results:
    by_draw.setdefault(r["config"]["model"]["ut_seed"], []).append(
        r["eval_accuracy"]
    )
  means = [np.mean(v) for v in by_draw.values()]
  within = [np.std(v, ddof=1) for v in by_draw.values() if len(v) > 1]
  return dict(
      mean=float(np.mean([a for v in by_draw.values() for a in v])),
      between_machines=float(np.std(means, ddof=1)) if len(means) > 1 else None,
      between_programs=float(np.mean(within)) if within else None,
      per_machine={str(k): v for k, v in sorted(by_draw.items())},
  )


def report(workdir, rows, cost=""):
  """machines.json and machines.md from the finished runs of each row; cost:
  a line under the table (`ut.experiments.sweep.cost_note`)."""
  from ut.io import reports  # pylint: disable=g-import-not-at-top

  out = []
  for row in rows:
    results = []
    for name in row["runs"].split(";"):
      with open(os.path.join(workdir, "runs", name, "metrics.json")) as f:
        results.append(json.load(f))
    out.append(
        dict(task=row["task"], variant=row["variant"], **spread(results))
    )
  reports.write_json(
      os.path.join(workdir, "machines.json"),
      dict(cells=out, provenance=reports.provenance()),
  )
  pct = lambda v: "" if v is None else f"{100 * v:.2f}"
  table = reports.format_table(
      [
          {
              "task": c["task"],
              "variant": c["variant"],
              "mean (%)": pct(c["mean"]),
              "std between machines": pct(c["between_machines"]),
              "std between programs": pct(c["between_programs"]),
              "runs (per draw)": " | ".join(
                  ", ".join(f"{100 * a:.1f}" for a in v)
                  for v in c["per_machine"].values()
              ),
          }
          for c in out
      ]
  )
  reports.write_markdown(os.path.join(workdir, "machines.md"), table, cost)
