"""The model's implementation switch: where training meets `ut.cpu`.

ModelSpec.impl names the forward: "reference" (the textbook computation of
`models.apply`) or "xla_cpu" (`ut.cpu.forward`, the same model restructured
for XLA CPU); "auto" is xla_cpu on a CPU backend. The rest of this module is
how a training step is sized for XLA CPU, asked for in one call:
`step_options(config, spec)`, which off the CPU returns the plain step
(`PLAIN`: the whole batch, no compiler options, no wrapper). No other
training module imports `ut.cpu`.

`spec` is duck-typed, as in `ut.cpu.forward` (this module sits below
`models`, which owns it): kind, variant, impl, model_width,
mlp_hidden_width, num_heads, last_only and what `ut.cpu.forward` reads.
"""

import dataclasses
import functools
import os
from typing import Any, Callable

from absl import logging
import jax

from ut.cpu import coefficients as cpu_coefficients
from ut.cpu import forward as cpu_forward
from ut.cpu import host
from ut.errors import UserError

IMPLS = ("reference", "xla_cpu", "auto")


def resolve_impl(impl: str) -> str:
  """The implementation impl names: "auto" is "xla_cpu" on a CPU backend and
  "reference" elsewhere (read when `apply` is traced: a static choice)."""
  if impl not in IMPLS:
    raise UserError(f"unknown model.impl={impl!r}; use one of {IMPLS}")
  if impl == "auto":
    return "xla_cpu" if jax.default_backend() == "cpu" else "reference"
  return impl


def apply_xla_cpu(params, spec, tokens_BxT, precision=None, last_only=False):
  """`models.apply` under impl xla_cpu: `ut.cpu.forward.apply`."""
  return cpu_forward.apply(
      params, spec, tokens_BxT, precision, last_only=last_only
  )


def splits_layers(spec, num_tokens: int) -> bool:
  """Whether `split_frozen` splits this model's layers for strings of
  num_tokens: the attention-only random UT in its coefficient form
  (`ut.cpu.coefficients.coefficient_form`) under impl xla_cpu."""
  return resolve_impl(spec.impl) == "xla_cpu" and cpu_forward.coefficient_form(
      spec, num_tokens
  )


def split_frozen(params: dict, spec, num_tokens: int) -> dict:
  """params whose frozen layers `apply` reads in place inside a jit
  (`ut.cpu.coefficients.split_layers`) where `splits_layers`; else params. Call
  it outside the jit; the result serves strings of num_tokens only."""
  if not splits_layers(spec, num_tokens):
    return params
  return dict(params, layers=cpu_coefficients.split_layers(params["layers"]))


def microbatches(
    batch_size: int,
    num_tokens: int,
    spec,
    m_wide: bool = False,
    on_cpu: bool | None = None,
) -> int:
  """How many microbatches a training step splits a (batch_size, num_tokens)
  batch into by default: `ut.cpu.host.microbatches`, cache-sized parts on CPU
  and the whole batch elsewhere. A token's activations are the model width
  wide, plus the MLP's hidden width with res_ln_mlp; the rule adds each
  string's attention scores and picks the budget by kind (and m for a random
  UT). The random UT's coefficient form (`ut.cpu.coefficients.coefficient_form`,
  whose per-string cost does not grow with m) takes the batch whole: 1 part
  was its fastest of 1, 4 and 16 on Dyck at m = 256 and 512
  (benchmarks/last_only_bench.py). So does the form with res_ln
  (`ut.cpu.coefficients.residual_coefficient_form`), whose tables each part
  would pay again. m_wide=True: the count for the M-wide order even there
  (`ut.cpu.forward.apply_m_wide`, a benchmark's baseline). on_cpu: whether
  JAX runs on its CPU (None: ask JAX, starting its backend)."""
  on_cpu = host.on_cpu() if on_cpu is None else on_cpu
  if (
      not m_wide
      and on_cpu
      and resolve_impl(spec.impl) == "xla_cpu"
      and (
          cpu_forward.coefficient_form(spec, num_tokens)
          or cpu_forward.residual_coefficient_form(
              spec, batch_size, num_tokens, spec.last_only
          )
      )
  ):
    return 1
  width = spec.model_width + (
      spec.mlp_hidden_width if spec.variant == "res_ln_mlp" else 0
  )
  return host.microbatches(
      batch_size,
      num_tokens,
      kind=spec.kind,
      width=width,
      num_heads=spec.num_heads,
      m=spec.model_width,
      cpu=on_cpu,
  )


def configured_microbatches(config) -> int | None:
  """The training step's microbatches: config.cpu.microbatches (configs/cpu.py)
  as a number, or None for `microbatches` ("auto", or no `cpu` section). A
  UserError unless it is "auto" or a positive integer."""
  cpu = config.get("cpu")
  value = "auto" if cpu is None else cpu.get("microbatches", "auto")
  if value == "auto":
    return None
  if not str(value).isdigit() or int(value) < 1:
    raise UserError(
        f"config.cpu.microbatches={value!r}; use auto or a "
        f"positive integer that divides the batch, e.g. 1"
    )
  return int(value)


def check_microbatches(config, share: int) -> None:
  """A UserError unless config.cpu.microbatches divides `share`, the strings
  of each step's batch on a device."""
  parts = configured_microbatches(config)
  if parts is not None and share % parts:
    raise UserError(
        f"config.cpu.microbatches={parts} must divide the "
        f"{share} strings of each step's batch on a device "
        f"(config.train.batch_size={config.train.batch_size}); e.g. "
        "microbatches=1"
    )


def compiler_options(config) -> dict:
  """`jax.jit` keyword arguments for the training step: those of the `cpu`
  section (configs/cpu.py; `ut.cpu.host.compiler_options`), and none without
  that section."""
  return host.compiler_options(config.get("cpu"))


def cpu_threads(config, spec, batch_shape: tuple[int, int]) -> int | None:
  """XLA CPU's thread pool for a run whose model is `spec` and whose
  training batches are (B, T) `batch_shape` (`ut.cpu.host.start_backend`),
  told before JAX starts: 1 where the step takes its batch one string at a
  time (its microbatches equal the batch, as at Zhong & Andreas's Dyck size:
  there a second thread splits ops too small to share and slowed the step);
  None, XLA's pool of one thread per core, otherwise (k-hop's whole-batch
  steps ran faster on two cores). Measured by `python -m
  benchmarks.peer_bench --startup=compare` (docs/performance.md)."""
  if spec.impl == "auto":  # On CPU: the launchers ask only there.
    spec = dataclasses.replace(spec, impl="xla_cpu")
  batch, tokens = batch_shape
  parts = configured_microbatches(config) or microbatches(
      batch, tokens, spec, on_cpu=True
  )
  return 1 if parts >= batch > 1 else None


class SplitLayersStep:
  """A jitted training step that passes it the frozen layers split
  (`split_frozen`) where the model reads them so: XLA CPU copies a slice of a
  stacked parameter inside the jit (results/bench/split_bench.md).

  The split is made from the first state and kept for the states this step
  returns: the step never changes the frozen layers (the optimizer zeroes
  their updates). Any other state (a restore, another run's) is split anew.
  """

  def __init__(self, step: Callable, spec):
    self._step, self._spec = step, spec
    self._layers = self._t = self._returned = None

  def __call__(self, state, batch):
    t = batch["tokens"].shape[1]
    if not splits_layers(self._spec, t):
      return self._step(state, batch)
    wv = state.params["layers"]["wv"]
    if wv is not self._returned or t != self._t:
      self._layers = split_frozen(state.params, self._spec, t)["layers"]
      self._t = t
    state, metrics = self._step(state, batch, layers=self._layers)
    self._returned = state.params["layers"]["wv"]
    return state, metrics


def _plain(step: Callable) -> Callable:
  return step


@dataclasses.dataclass(frozen=True)
class StepOptions:
  """How this backend runs the training step (`step_options`).

  microbatches: the parts each step's batch (each device's share, data
    parallel) is summed over, or None for `microbatches` of its shape.
  jit: extra `jax.jit` keyword arguments for the step.
  wrap: the jitted one-device step -> the step training calls.
  """

  microbatches: int | None = 1
  jit: dict[str, Any] = dataclasses.field(default_factory=dict)
  wrap: Callable[[Callable], Callable] = _plain


PLAIN = StepOptions()  # The whole batch, XLA's defaults, no wrapper.


def step_options(config, spec) -> StepOptions:
  """The step's options for this backend: on CPU, config.cpu's microbatches
  and compiler options and the frozen layers split (`SplitLayersStep`); off
  the CPU, `PLAIN`."""
  if not host.on_cpu():
    return PLAIN
  if not config.train.data_parallel:
    _log_cores_hint()
  return StepOptions(
      microbatches=configured_microbatches(config),
      jit=compiler_options(config),
      wrap=functools.partial(SplitLayersStep, spec=spec),
  )


def _log_cores_hint() -> None:
  """One device on several cores: how to use them."""
  cores = (
      len(os.sched_getaffinity(0))
      if hasattr(os, "sched_getaffinity")
      else os.cpu_count() or 1
  )
  if jax.local_device_count() == 1 and cores > 1:
    logging.info(
        "one device on %d cores: `launch.train --cpu_devices=%d` "
        "splits each batch over them (data parallel: 1.17-1.76x "
        "the steps/s on 2 cores, results/bench/dp), and "
        "`launch.sweep --workers=%d` trains that many runs at once",
        cores,
        cores,
        cores,
    )
