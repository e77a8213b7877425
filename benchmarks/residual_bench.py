r"""The random UT with res_ln: its training step in coefficient form against
the M-wide order.

  python -m benchmarks.residual_bench
  python -m benchmarks.record --out=results/bench/residual_bench.md -- \
      taskset -c 0 python -m benchmarks.residual_bench

`form` is `step_lib.train_step` as training runs it, where
`ut.cpu.coefficients.residual_coefficient_form` holds
(`_random_residual_coefficients`: the values from tables of about
P M^2 H multiply-adds a layer, P = (T + V) (1 + H)^l, paid once a batch);
`m_wide` is the same step with the rule off, the forward `apply_m_wide`
(B T M^2 H a layer but the first), with its own default microbatches. Both
jitted with the state donated; before timing they take the same steps from
the same state and must end close (float32; the two orders round
differently). Printed: medians of --repeats interleaved rounds (each --steps
steps on one batch), their ratio, the multiply-adds ratios that the rule
reads (`residual_costs`), what it picks, and the 2048^2 matmul speed
measured before them.

Cases (the width study's k-hop cells, configs/width.py: batch 32 of 32
tokens, H = 2, k_u = 32, embedding scale 0.1):
  khop1_m400 .. khop1_m1600  k = 1 (L = 2) at m = N/2, N, 2N (N = 800);
  khop2_m632 .. khop2_m2528  k = 2 (L = 3) at m = N/4, the k-hop table's
                             matched width 928, N/2, N (N = 2528);
  dyck       configs/dyck.py:model=random,variant=res_ln (M = 256, T = 61,
             batch 128; the loss reads the last row only).
"""

from unittest import mock

from absl import app
import jax

from benchmarks import step_pairs
from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.cpu import coefficients as cpu_coefficients
from ut.cpu import forward as cpu_forward
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import implementation
from ut.training import models
from ut.training import step as step_lib

_KHOP = {
    "khop1_m400": (1, 400),
    "khop1_m800": (1, 800),
    "khop1_m1600": (1, 1600),
    "khop2_m632": (2, 632),
    "khop2_m928": (2, 928),
    "khop2_m1264": (2, 1264),
    "khop2_m2528": (2, 2528),
}
_REPEATS, _STEPS, _CASES = step_pairs.define_flags(
    [
        "khop1_m400",
        "khop1_m800",
        "khop2_m632",
        "khop2_m928",
        "khop2_m1264",
        "khop2_m2528",
        "dyck",
    ]
)


def _configs():
  configs = {}
  for name, (k, m) in _KHOP.items():
    config = khop_config.get_config(f"model=random,variant=res_ln,k={k}")
    config.model.update(m=m, embed_scale=0.1)
    configs[name] = config
  configs["dyck"] = dyck_config.get_config("model=random,variant=res_ln")
  return configs


def _step(spec, tx, form, microbatches):
  def step(state, batch):
    with mock.patch.object(
        cpu_forward, "residual_coefficient_form", lambda *_: form
    ):
      return step_lib.train_step(
          state, batch, spec=spec, tx=tx, microbatches=microbatches
      )

  return jax.jit(step, donate_argnums=0)


def _case(config):
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)
  state, tx, _ = checkpoint.init_state(config, spec)
  batch = jax.device_put(data_lib.train_batch(config, task, 0))
  b, t = batch["tokens"].shape
  m_wide = implementation.microbatches(b, t, spec, m_wide=True)
  steps = {
      "m_wide": _step(spec, tx, False, m_wide),
      "form": _step(spec, tx, True, 1),
  }
  states = step_pairs.same_steps(steps, state, batch, rtol=1e-4, atol=1e-5)
  coefficient, rows, m_wide_madds = cpu_coefficients.residual_costs(
      spec, b, t, spec.last_only
  )
  weighted = coefficient + (cpu_coefficients.RESIDUAL_ROW_WEIGHT - 1) * rows
  rule = cpu_forward.residual_coefficient_form(spec, b, t, spec.last_only)
  return (steps, states, batch), (
      m_wide_madds / coefficient,
      m_wide_madds / weighted,
      rule,
  )


def main(argv):
  del argv
  configs = _configs()
  step_pairs.check_cases(_CASES.value, configs)
  head = step_pairs.header("residual", _REPEATS.value, _STEPS.value)
  built = {name: _case(configs[name]) for name in _CASES.value}
  ms = step_pairs.median_ms(
      {name: case for name, (case, _) in built.items()},
      _REPEATS.value,
      _STEPS.value,
  )
  print(head)
  print(
      f"  {'case':<12} {'m_wide ms':>10} {'form ms':>9} {'ratio':>6}"
      f" {'madds ratio':>11} {'weighted':>8} {'rule':>6}"
  )
  for name, t in ms.items():
    slow, fast = t["m_wide"], t["form"]
    madds, weighted, rule = built[name][1]
    print(
        f"  {name:<12} {slow:10.1f} {fast:9.1f} {slow / fast:6.2f}"
        f" {madds:11.2f} {weighted:8.2f} {'form' if rule else 'm_wide':>6}"
    )
  print(
      "  ratio = m_wide ms / form ms; madds ratio = the M-wide order's "
      "multiply-adds / the form's (`residual_costs`); weighted: the form's "
      "per-row part counted RESIDUAL_ROW_WEIGHT times; rule: what "
      "`residual_coefficient_form` picks (the form where weighted >= 1.25)"
  )


if __name__ == "__main__":
  app.run(main)
