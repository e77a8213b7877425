"""Compile a trained target into fixed UTs. See configs/compiled_ut.py."""

from absl import flags
from ml_collections import config_flags

from launch import cli
from ut.io import reports
from ut.training import trained_to_ut as compiled

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder.")


def main(argv):
  del argv
  result = compiled.run(_CONFIG.value, _WORKDIR.value)
  print(reports.format_table(result["rows"], floatfmt="{:.5g}"))
  print(f"wrote {_WORKDIR.value}/compiled_ut.json")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
