"""Training entry point: python -m launch.train --config=configs/dyck.py --workdir=W."""

from absl import flags
from ml_collections import config_flags

from launch import cli
from ut import train

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder: checkpoints, metrics.")


def main(argv):
  del argv
  final = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  print(f"step {final['step']}: eval accuracy {final['eval_accuracy']:.4f} "
        f"(metrics in {_WORKDIR.value}/metrics.json)")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
