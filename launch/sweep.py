"""Sweep entry point: python -m launch.sweep --config=configs/<table>.py --workdir=W.

Runs the config file's sweep(add) grid, batching runs that share shapes over
all devices, skipping runs already finished in W, and writes W/table.{csv,json,md}.
"""

from absl import flags
import jax

from launch import cli
from ut import sweep

_CONFIG = flags.DEFINE_string("config", None, "Config file with sweep(add).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep folder.")
_BATCHING = flags.DEFINE_enum("batching", "auto", ["auto", "vmap", "sequential"],
                              "auto: vmap groups unless on a single CPU device.")
_AGGREGATE_ONLY = flags.DEFINE_bool(
    "aggregate_only", False, "Train nothing: tabulate the finished runs.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False,
                                 "Call jax.distributed.initialize() (multi-host).")


def main(argv):
  del argv
  if _DISTRIBUTED.value:
    jax.distributed.initialize()
  rows = sweep.run_sweep(_CONFIG.value, _WORKDIR.value, _BATCHING.value,
                         _AGGREGATE_ONLY.value)
  print(sweep.markdown_table(rows))
  print(f"wrote {_WORKDIR.value}/table.csv, .json and .md")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
