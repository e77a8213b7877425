"""Counting baseline on the Dyck-1 held-out sets, the ones the table's runs use.

  python -m launch.dyck_baseline --workdir=results/dyck

Predicts 'balanced' when a string has as many '(' as ')'. For each mix of
configs/dyck.py, on its fixed validation and test sets: their sizes, the
counting baseline's accuracy overall, by length bucket, by subset and on the
short balanced strings (ut/experiments/dyck_protocol.py), and
seen_in_training: the share of the set's strings that also occur among the
training strings of the run with seed 0..seeds-1 (config.train.steps batches,
as `ut.training.train` draws them). The training stream redraws held-out
strings, so it is 0. Writes counting_baseline.{json,md} (with provenance).
"""

from absl import flags

from configs import dyck as dyck_config
from launch import cli
from ut.errors import UserError
from ut.experiments import dyck_protocol
from ut.io import reports
from ut.training.tasks import dyck

_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder.")
_SEEDS = flags.DEFINE_integer(
    "seeds", 3, "Check the training streams of " "seeds 0..seeds-1."
)
_STEPS = flags.DEFINE_integer(
    "steps",
    None,
    "Check the first STEPS training batches of each seed (default: all of "
    "config.train.steps, every batch a run can train on).",
)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace earlier outputs.")


def main(argv):
  del argv
  if _SEEDS.value < 1:
    raise UserError(f"--seeds={_SEEDS.value}; use 1 or more")
  if _STEPS.value is not None and _STEPS.value < 1:
    raise UserError(f"--steps={_STEPS.value}; use 1 or more")
  paths = [
      f"{_WORKDIR.value}/counting_baseline.{ext}" for ext in ("json", "md")
  ]
  reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
  mixes, summary, text = {}, [], []
  for mix in dyck.MIXES:
    report = dyck_protocol.counting_report(dyck_config.get_config(f"mix={mix}"))
    seen = [
        dyck_protocol.seen_in_training(_config(mix, seed))
        for seed in range(_SEEDS.value)
    ]
    report["seen_in_training"] = {str(seed): s for seed, s in enumerate(seen)}
    mixes[mix] = report
    for split in dyck_protocol.SPLITS:
      r = report[split]
      summary.append(
          dict(
              mix=mix,
              split=split,
              num=r["num"],
              distinct=r["distinct"],
              balanced=r["balanced"],
              counting_accuracy=r["counting"]["accuracy"],
              seen_in_training=max(s[split] for s in seen),
          )
      )
    short = report["short_balanced"]
    text += [
        f"\n{mix}: counting baseline (%) by part; the held-out sets hold "
        f"{short['held_out']} of the {short['total']} balanced strings "
        f"of at most {dyck.SHORT} brackets\n",
        reports.format_table(
            dyck_protocol.breakdown_rows(
                {s: report[s]["counting"] for s in dyck_protocol.SPLITS}
            )
        ),
    ]
  reports.write_json(
      paths[0],
      dict(
          mixes=mixes,
          seeds=_SEEDS.value,
          steps_checked=_STEPS.value or "all",
          provenance=reports.provenance(),
      ),
  )
  table = "\n".join(
      [
          f"seen_in_training: the largest share over seeds 0..{_SEEDS.value - 1}",
          reports.format_table(summary, floatfmt="{:.4f}"),
          *text,
      ]
  )
  reports.write_text(paths[1], table + "\n")
  print(table)


def _config(mix, seed):
  config = dyck_config.get_config(f"mix={mix},seed={seed}")
  if _STEPS.value is not None:
    config.train.steps = min(_STEPS.value, config.train.steps)
  return config


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(main)
