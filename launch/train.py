"""Training entry point: python -m launch.train --config=configs/dyck.py --workdir=W.

Data parallel on a multi-core CPU: --cpu_devices=N makes N JAX devices of the
CPU's cores and sets config.train.data_parallel, so that each device takes
1/N of every batch (ut.training.step.make_step; the same step up to the order of float
additions; 1.17-1.76x the steps/s on 2 cores, results/bench/dp):
  python -m launch.train --config=configs/dyck.py --workdir=W --cpu_devices=2
On several GPUs, --config.train.data_parallel=True alone.

On CPU the config has configs/cpu.py's section (XLA CPU's fusions, the step's
microbatches), e.g. --config.cpu.microbatches=1; elsewhere it has none.
"""

import sys

from absl import flags
import jax

from launch import cli
from ut.cpu import host
from ut.training import models
from ut.training import train

_CONFIG = cli.define_config_flag("config", "Training config.")
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run folder: checkpoints, metrics."
)
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices",
    None,
    "Make this many JAX devices of the CPU and, if more "
    "than one, split each batch over them (config.train.data_parallel); e.g. "
    "the number of cores.",
)


def before_backend():
  """--cpu_devices, and XLA CPU's thread pool for this run where
  config.cpu.threads is "auto" (models.cpu_threads), before JAX starts."""
  if _CPU_DEVICES.value is not None:
    if _CPU_DEVICES.value < 1:
      sys.exit(f"error: --cpu_devices={_CPU_DEVICES.value} must be at least 1")
    jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value)
  config = _CONFIG.value
  data_parallel = (_CPU_DEVICES.value or 1) > 1
  if "cpu" in config and config.cpu.threads == "auto" and not data_parallel:
    if host.cpu_expected():
      config.cpu.threads = str(models.cpu_threads(config) or 0)


def main(argv):
  del argv
  if _CPU_DEVICES.value is not None and _CPU_DEVICES.value > 1:
    _CONFIG.value.train.data_parallel = True
  config = cli.hardware_overlay(_CONFIG.value)
  final = train.train_and_evaluate(config, _WORKDIR.value)
  print(
      f"step {final['step']}: eval accuracy {final['eval_accuracy']:.4f} "
      f"(metrics in {_WORKDIR.value}/metrics.json)"
  )


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main, before_backend=before_backend)
