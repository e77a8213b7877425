"""The learnability gap: train UTs from compiled programs plus noise.
See configs/learnability.py."""

from absl import flags
from ml_collections import config_flags

from launch import cli
from ut.experiments import learnability

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder.")


def main(argv):
  del argv
  result = learnability.run(_CONFIG.value, _WORKDIR.value)
  print(learnability.markdown(result))
  print(f"wrote {_WORKDIR.value}/learnability.{{json,md,png}}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
