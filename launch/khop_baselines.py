"""Trivial k-hop predictors per k, on the held-out test strings of the table's
runs (ut/experiments/khop_baselines.py).

  python -m launch.khop_baselines --ks=1,2,3,4 --workdir=results/khop/baselines

Writes baselines.{json,md} (with provenance): for each k and seed, the
accuracy of copying the current letter and of the best predictor from the
last 1, 2 and 3 letters.
"""

from absl import flags

from configs import khop as khop_config
from launch import cli
from ut.errors import UserError
from ut.experiments import khop_baselines
from ut.io import reports

_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder.")
_KS = flags.DEFINE_list("ks", ["1", "2", "3", "4"], "Hop counts k.")
_SEEDS = flags.DEFINE_integer(
    "seeds", 3, "Score the test strings of seeds 0..seeds-1."
)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace earlier outputs.")


def main(argv):
  del argv
  if _SEEDS.value < 1:
    raise UserError(f"--seeds={_SEEDS.value}; use 1 or more")
  if not all(k.isdigit() and int(k) >= 1 for k in _KS.value):
    raise UserError(f"--ks={','.join(_KS.value)}; use integers >= 1, e.g. 1,2")
  paths = [f"{_WORKDIR.value}/baselines.{ext}" for ext in ("json", "md")]
  reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
  rows = []
  for k in map(int, _KS.value):
    for seed in range(_SEEDS.value):
      config = khop_config.get_config(f"k={k},seed={seed}")
      rows.append(
          dict(
              k=k,
              seed=seed,
              **khop_baselines.baselines(config),
              data=dict(config.data),
          )
      )
  reports.write_json(paths[0], dict(rows=rows, provenance=reports.provenance()))
  shown = [
      {key: v for key, v in r.items() if key not in ("data", "train_strings")}
      for r in rows
  ]
  table = reports.format_table(shown, floatfmt="{:.4f}")
  reports.write_text(paths[1], table + "\n")
  print(table)


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(main)
