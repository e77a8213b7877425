"""Counting baseline on the Dyck-1 held-out sets, the ones the table's runs use.

  python -m launch.dyck_baseline --workdir=results/dyck

Predicts 'balanced' when a string has as many '(' as ')'. Writes
counting_baseline.{json,md} (accuracy % per mix and seed, with provenance).

seen_in_training: the share of held-out strings that also occur among the
run's training strings (config.train.steps batches of the training stream, as
`ut.training.train` draws them). Short Dyck strings are few (2055 balanced words up to
length 16), so on Dyck most of the held-out set has been trained on.
"""

from absl import flags

from configs import dyck as dyck_config
from launch import cli
from ut.training import data as data_lib
from ut.io import reports
from ut.training import train
from ut.errors import UserError
from ut.training.tasks import dyck

_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Held-out sets of seeds 0..seeds-1.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace earlier outputs.")


def seen_in_training(config):
  """Share of config's held-out examples whose tokens equal a training example's."""
  task = data_lib.make_task(config)
  trained = {row.tobytes() for step in range(config.train.steps)
             for row in train.train_batch(config, task, step)["tokens"]}
  held_out = [row.tobytes() for batch in train.eval_batches(config, task)
              for row in batch["tokens"]]
  return sum(row in trained for row in held_out) / len(held_out)


def main(argv):
  del argv
  if _SEEDS.value < 1:
    raise UserError(f"--seeds={_SEEDS.value}; use 1 or more")
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
                                                                         labels),
                       seen_in_training=seen_in_training(config)))
  reports.write_json(paths[0], dict(rows=rows, provenance=reports.provenance()))
  table = reports.format_table(rows, floatfmt="{:.4f}")
  reports.write_text(paths[1], table + "\n")
  print(table)


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(main)
