"""Random-UT width threshold entry point. See configs/threshold.py for the command."""

from absl import flags
import jax
from ml_collections import config_flags

from launch import cli
from ut.experiments import threshold
from ut.io import reports

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "configs/threshold.py", lock_config=True
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Output folder " "(default: config.workdir)."
)


def main(argv):
  del argv
  jax.config.update(
      "jax_enable_x64", True
  )  # The compile and check are float64.
  config = _CONFIG.value
  workdir = _WORKDIR.value or config.workdir
  _, summary = threshold.run(config, workdir)
  print(reports.format_table(summary))
  print(f"wrote {workdir}/threshold.csv, .json and .png")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  cli.run(main)
