r"""The CPU host's settings: one overlay, added as `config.cpu` on CPU only.

  python -m launch.train --config=configs/dyck.py:smoke --workdir=/tmp/w \
      --config.cpu.ynn_fusions=False --config.cpu.microbatches=1

`launch.train` reads a config with this section (launch/cli.py adds it while
it parses --config, so that --config.cpu.* overrides work) and keeps it when
JAX runs on its CPU backend; on GPU or TPU it removes it, and none of these
settings exists or runs there (a --config.cpu.* override there is an error).
Every launcher tunes malloc on CPU with `tune_malloc` and sets NumPy's huge
pages with `numpy_hugepages` (this file's values, or the --config's). The
mechanisms are in ut/cpu/host.py. A run resumes with other host settings: a
workdir's config is compared without this section
(ut.training.records.stored_config). Expected: the same results as without the
overlay, bit for bit (these are today's defaults on CPU).
"""

import ml_collections


def get_config():
  """The section `config.cpu`."""
  return ml_collections.ConfigDict(
      dict(
          # glibc keeps XLA's per-step buffers in one heap (ut.cpu.host.tune_malloc;
          # process-wide, applied by launch.cli before JAX starts).
          tune_malloc=True,
          # NumPy's large arrays in transparent huge pages (madvise): off, since
          # on this 2-core VM the scale run took 1.28x longer as a process with
          # them (ut.cpu.host.numpy_hugepages; results/bench/hugepage_bench.md).
          numpy_hugepages=False,
          # False: XLA CPU without its YNNPACK fusions (ut.cpu.host.compiler_options).
          ynn_fusions=True,
          # Parts of each training step's batch (of each device's share when data
          # parallel): "auto" for ut.cpu.host.microbatches' cache-sized budget,
          # or a number that divides it, e.g. "1" for the whole batch.
          microbatches="auto",
          # XLA CPU's thread pool (ut.cpu.host.start_backend): "auto" lets
          # launch.train choose per run (ut.training.models.cpu_threads: one
          # thread where the step takes one string at a time, as at Zhong &
          # Andreas's Dyck size; else one per core) and other launchers use
          # one per core; "0": one per core; "1", "2", ...: that many.
          threads="auto",
      )
  )


def overlay(config):
  """Adds the section `cpu` to `config` (locked or not) unless it has one;
  returns `config`."""
  if "cpu" not in config:
    with config.unlocked():
      config.cpu = get_config()
  return config
