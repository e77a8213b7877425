r"""The attention-only sparse UT's training step with the inputs routed along
head strings (`ut.cpu.sparse_forms._apply_sparse_paths`) against the m-wide
state's levels routed (`ut.cpu.sparse_forms._apply_sparse`), and which of the two
`apply` picks (`ut.cpu.sparse_forms.sparse_paths_form`).

  python -m benchmarks.paths_bench
  python -m benchmarks.record --out=results/bench/paths_bench.md -- \
      taskset -c 0 python -m benchmarks.paths_bench

Both steps are `step_lib.make_step`'s jitted `step_lib.train_step` (state donated,
the default microbatches), each called (so traced) with `sparse_paths_form`
(the rule `apply` follows) forced to its order; `_apply_sparse` serves the LayerNorm
variants too. Before timing, both take the same steps from the same state and
must end equal. Printed: medians of --repeats interleaved rounds (each
--steps steps on one batch), their ratio, and the 2048^2 matmul speed
measured before them.

Cases: configs/khop.py:model=sparse,variant=attn at k = 2 (m = 928) and
k = 3 (m = 1952), and configs/dyck.py:model=sparse,variant=attn (m = 416).
"""

from unittest import mock

from absl import app
import jax

from benchmarks import step_pairs
from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.cpu import forward as cpu_forward
from ut.cpu import sparse_forms as cpu_sparse_forms
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import models
from ut.training import step as step_lib

_REPEATS, _STEPS, _CASES = step_pairs.define_flags(
    ["khop_k2", "khop_k3", "dyck"]
)


def _configs():
  return {
      "khop_k2": khop_config.get_config("model=sparse,variant=attn,k=2"),
      "khop_k3": khop_config.get_config("model=sparse,variant=attn,k=3"),
      "dyck": dyck_config.get_config("model=sparse,variant=attn"),
  }


ORDERS = ("levels", "paths")


def _forced(config, spec, tx, paths):
  """`step_lib.make_step`'s step, every call (so any trace) with the order
  forced: `apply` asks `sparse_paths_form` while it traces."""
  step = step_lib.make_step(config, spec, tx)[0]

  def run(state, batch):
    with mock.patch.object(cpu_forward, "sparse_paths_form", lambda *_: paths):
      return step(state, batch)

  return run


def _case(config):
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  state, tx, _ = checkpoint.init_state(config, spec)
  batch = jax.device_put(data_lib.train_batch(config, task, 0))
  steps = {k: _forced(config, spec, tx, k == "paths") for k in ORDERS}
  states = step_pairs.same_steps(steps, state, batch, rtol=1e-4, atol=1e-6)
  return spec, steps, states, batch


def main(argv):
  del argv
  configs = _configs()
  step_pairs.check_cases(_CASES.value, configs)
  head = step_pairs.header("paths", _REPEATS.value, _STEPS.value)
  cases = {name: _case(configs[name]) for name in _CASES.value}
  ms = step_pairs.median_ms(
      {name: case[1:] for name, case in cases.items()},
      _REPEATS.value,
      _STEPS.value,
  )
  print(head)
  print(
      f"  {'case':<9} {'m':>5} {'levels ms':>9} {'paths ms':>8} {'ratio':>6}"
      f" {'madds ratio':>11} {'apply runs':>10}"
  )
  for name, t in ms.items():
    slow, fast = t["levels"], t["paths"]
    spec, _, _, batch = cases[name]
    n = batch["tokens"].shape[1]
    paths, levels = cpu_sparse_forms.sparse_string_costs(
        spec, n, spec.last_only
    )
    runs = (
        "paths"
        if cpu_forward.sparse_paths_form(spec, n, spec.last_only)
        else "levels"
    )
    print(
        f"  {name:<9} {spec.model_width:5d} {slow:9.2f} {fast:8.2f}"
        f" {slow / fast:6.2f} {levels / paths:11.2f} {runs:>10}"
    )
  print(
      "  ratio = levels ms / paths ms; madds ratio = levels / paths "
      "multiply-adds a string (`sparse_string_costs`); apply runs: what "
      "`sparse_paths_form` picks"
  )


if __name__ == "__main__":
  app.run(main)
