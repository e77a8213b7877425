"""Counting baseline on the Dyck-1 held-out sets, the ones the table's runs use.

  python -m launch.dyck_baseline --workdir=results/dyck

Predicts 'balanced' when a string has as many '(' as ')'. Writes
counting_baseline.{json,md} (accuracy % per mix and seed, with provenance).
"""

from absl import flags

from configs import dyck as dyck_config
from launch import cli
from ut import data as data_lib
from ut import reports
from ut.tasks import dyck

_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Held-out sets of seeds 0..seeds-1.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace earlier outputs.")


def main(argv):
  del argv
  paths = [f"{_WORKDIR.value}/counting_baseline.{ext}" for ext in ("json", "md")]
  reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
  rows = []
  for mix in dyck.MIXES:
    for seed in range(_SEEDS.value):
      config = dyck_config.get_config(f"mix={mix},seed={seed}")
      _, labels, texts = dyck.generate(config.eval.num, config.data.max_len, mix,
                                       data_lib.stream_seed(seed, 1))
      rows.append(dict(mix=mix, seed=seed, max_len=config.data.max_len,
                       num=config.eval.num, balanced=float(labels.mean()),
                       counting_accuracy=dyck.counting_baseline_accuracy(texts,
                                                                         labels)))
  reports.write_json(paths[0], dict(rows=rows, provenance=reports.provenance()))
  table = reports.format_table(rows, floatfmt="{:.4f}")
  with open(paths[1], "w") as f:
    f.write(table + "\n")
  print(table)


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(main)
