"""Simulate-check entry point. See configs/simulate.py for the commands."""

from absl import flags
import jax
from ml_collections import config_flags

from launch import cli
from ut.experiments import simulate_table
from ut.io import reports

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "configs/simulate.py", lock_config=True
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Table output folder " "(default: config.workdir)."
)


def main(argv):
  del argv
  jax.config.update(
      "jax_enable_x64", True
  )  # float64 checks; float32 is explicit.
  config = _CONFIG.value
  if config.target:
    _, report = simulate_table.run_target_file(config)
    print({k: v for k, v in report.items() if k != "provenance"})
    print(f"wrote {config.out} and its report beside it")
    return
  workdir = _WORKDIR.value or config.workdir
  rows = simulate_table.run_table(config, workdir)
  print(reports.format_table(rows))
  print(f"wrote {workdir}/simulate_table.csv and .json")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  cli.run(main)
