"""Shared entry-point plumbing: user errors become one line and a non-zero exit;
JAX's persistent compilation cache; the CPU host's settings (configs/cpu.py)
on CPU only; a GPU's memory settings (--gpu_preallocate,
--gpu_memory_fraction), for several processes sharing one GPU.
"""

import logging as py_logging
import os
import sys

from absl import app
from absl import flags
from absl import logging
import jax
import ml_collections
from ml_collections import config_flags
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from configs import cpu as cpu_config
from ut.cpu import host
from ut.errors import UserError

# JAX's persistent compilation cache, unless $UT_JAX_CACHE names another folder
# (an empty value turns it off).
DEFAULT_JAX_CACHE = "~/.cache/ut/jax"

# A GPU's memory, set before JAX starts its backend. Unset: JAX's defaults
# (or the XLA_PYTHON_CLIENT_* variables), one process taking 75% of the GPU.
_GPU_PREALLOCATE = flags.DEFINE_bool(
    "gpu_preallocate",
    None,
    "Whether JAX reserves its GPU memory at start (JAX's default: yes). "
    "--nogpu_preallocate lets several processes share one GPU.",
)
_GPU_MEMORY_FRACTION = flags.DEFINE_float(
    "gpu_memory_fraction",
    None,
    "The share of the GPU's memory JAX may use, in (0, 1] (JAX's default: "
    "0.75), e.g. 0.3 for three processes on one GPU.",
)


class _QuietLibraries(py_logging.Filter):
  """Drops INFO chatter from orbax and jax's backend probing; keeps warnings."""

  def filter(self, record):
    noisy = "/orbax/" in record.pathname or "xla_bridge" in record.pathname
    return record.levelno >= py_logging.WARNING or not noisy


def _parse_flags(argv):
  """absl's flag parsing, except that a bad flag prints one `error:` line (the
  innermost UserError of a config file's get_config if there is one) and exits
  with 2, instead of FATAL or a traceback; so does a stray argument (an absl
  program takes flags only)."""
  try:
    argv = flags.FLAGS(argv)
  except flags.Error as e:
    user, cause = None, e
    while cause is not None:
      if isinstance(cause, UserError):
        user = cause
      cause = cause.__cause__ or cause.__context__
    print(f"error: {user or e}", file=sys.stderr)
    sys.exit(2)
  except (AttributeError, KeyError) as e:  # --config.<field> that is not one.
    detail = e
    while isinstance(detail, BaseException) and detail.args:
      detail = detail.args[0]  # ml_collections nests the KeyError's text.
    detail = str(detail).replace("\n", "; ")
    print(f"error: no such config field: {detail}", file=sys.stderr)
    sys.exit(2)
  if len(argv) > 1:
    print(
        f"error: unexpected argument(s) {' '.join(argv[1:])}; flags start "
        "with --, and config arguments follow a colon: "
        "--config=configs/dyck.py:model=sparse,smoke",
        file=sys.stderr,
    )
    sys.exit(2)
  return argv


def use_compilation_cache():
  """Turns on JAX's persistent compilation cache in $UT_JAX_CACHE (default
  DEFAULT_JAX_CACHE; empty: off), for every compile however small or quick;
  returns the folder or None. A later `jax_compilation_cache_dir` set before
  the first compile wins (`ut.experiments.sweep.use_compilation_cache` keeps a
  sweep's cache in its workdir)."""
  path = os.environ.get("UT_JAX_CACHE", DEFAULT_JAX_CACHE)
  if not path:
    return None
  path = os.path.expanduser(path)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update(
      "jax_persistent_cache_min_entry_size_bytes", -1
  )  # Any size.
  return path


def define_config_flag(
    name, help_string, flag_values=flags.FLAGS, sys_argv=None
):
  """config_flags.DEFINE_config_file (locked, no default), except that the
  loaded config gains configs/cpu.py's section `cpu` before the --name.*
  overrides are read, so that --config.cpu.ynn_fusions=False works; which
  backend JAX runs on is not known yet. `hardware_overlay` then keeps or
  removes the section."""
  holder = config_flags.DEFINE_config_file(
      name,
      None,
      help_string,
      flag_values=flag_values,
      lock_config=True,
      sys_argv=sys_argv,
  )
  flag_values[name].parser = _CpuOverlayParser(name=name, lock_config=True)
  return holder


class _CpuOverlayParser(ConfigFileFlagParser):
  """Loads a config file and adds configs/cpu.py's section."""

  def parse(self, path):
    config = super().parse(path)
    if isinstance(config, ml_collections.ConfigDict):
      cpu_config.overlay(config)
    return config


def hardware_overlay(config):
  """`config` as this host runs it: with configs/cpu.py's section `cpu` when
  JAX runs on its CPU backend (added if missing), without it elsewhere.

  Starts JAX's backend: call it after settings such as jax_num_cpu_devices.
  Off CPU, a `cpu` section that differs from configs/cpu.py's (an override
  such as --config.cpu.ynn_fusions=False) is a UserError.
  """
  backend = jax.default_backend()
  if backend == "cpu":
    return cpu_config.overlay(config)
  if "cpu" in config:
    if config.cpu.to_dict() != cpu_config.get_config().to_dict():
      raise UserError(
          f"config.cpu is for CPU hosts, and JAX runs on {backend} "
          f"here; drop the --config.cpu.* flags"
      )
    with config.unlocked():
      del config["cpu"]
  return config


def gpu_memory(preallocate=None, fraction=None, environ=os.environ):
  """Sets JAX's GPU memory variables (XLA_PYTHON_CLIENT_PREALLOCATE and
  _MEM_FRACTION) from the flags' values; None leaves a variable as it is.
  Takes effect only before JAX starts its backend; a no-op on a CPU."""
  if fraction is not None and not 0 < fraction <= 1:
    raise UserError(
        f"--gpu_memory_fraction={fraction}; use a share in (0, 1], e.g. 0.3"
    )
  if preallocate is not None:
    environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = str(preallocate).lower()
  if fraction is not None:
    environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:g}"


def _cpu_section(flag_values):
  """The launcher's --config's section `cpu`, or configs/cpu.py's."""
  config = flag_values["config"].value if "config" in flag_values else None
  return (
      config.get("cpu")
      if isinstance(config, ml_collections.ConfigDict)
      else None
  ) or cpu_config.get_config()


def tune_host(flag_values=flags.FLAGS):
  """Process-wide settings before JAX starts its backend, on CPU only: glibc
  malloc tuning (`ut.cpu.host.tune_malloc`) when the launcher's --config has
  cpu.tune_malloc set, and NumPy's huge pages as cpu.numpy_hugepages says
  (`ut.cpu.host.numpy_hugepages`); without a `cpu` section, as configs/cpu.py
  says. Returns whether it tuned malloc."""
  section = _cpu_section(flag_values)
  if not host.cpu_expected():
    return False
  # Configs saved before the field existed: configs/cpu.py's value.
  hugepages = section.get(
      "numpy_hugepages", cpu_config.get_config().numpy_hugepages
  )
  host.numpy_hugepages(hugepages)
  return bool(section.tune_malloc and host.tune_malloc())


def cpu_threads(flag_values=flags.FLAGS):
  """XLA CPU's thread pool size for this process, from the --config's
  cpu.threads (configs/cpu.py's value without one): None for XLA's pool of
  one thread per core ("0", or "auto" that no launcher has resolved), or a
  number of threads."""
  section = _cpu_section(flag_values)
  threads = str(section.get("threads", cpu_config.get_config().threads))
  if threads == "auto":
    return None
  if not threads.isdigit():
    raise UserError(
        f"cpu.threads={threads!r}; use auto, 0 (one thread per core) or a "
        "number of threads"
    )
  return int(threads) or None


def run(main, before_backend=None):
  """Like absl.app.run, but a UserError prints `error: ...` and exits with 2.
  Before `main`: the compilation cache, a CPU host's settings, a GPU's memory
  settings, then `before_backend()` (settings JAX reads when its backend
  starts, such as jax_num_cpu_devices), then, on a CPU whose cpu.threads
  names a number, JAX's backend with that many threads
  (`ut.cpu.host.start_backend`; otherwise it starts when first used)."""

  def guarded(argv):
    logging.get_absl_handler().addFilter(_QuietLibraries())
    use_compilation_cache()
    try:
      gpu_memory(_GPU_PREALLOCATE.value, _GPU_MEMORY_FRACTION.value)
      tune_host()
      if before_backend is not None:
        before_backend()
      if host.cpu_expected():
        host.start_backend(cpu_threads())
      return main(argv)
    except UserError as e:
      logging.flush()
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)

  app.run(guarded, flags_parser=_parse_flags)
