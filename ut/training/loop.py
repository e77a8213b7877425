"""The training loop of one run and of a vmapped group of runs.

`train_loop` steps, logs, evaluates, stops early (`stop_reason`), saves and
notices divergence; it returns a `LoopResult`, from which `run_summary`
makes a run's final metrics.
"""

import dataclasses
import json
import time
from typing import Callable

from absl import logging
import jax
import numpy as np

from ut.errors import UserError
from ut.training import held_out
from ut.training import models
from ut.training import optimizer
from ut.training.optimizer import TrainState


class TrainingDiverged(UserError):
  """The loss became NaN or inf."""


def stop_reason(tc, curve: list) -> str | None:
  """Why a run whose held-out accuracy curve is `curve` ([(step, accuracy)],
  one entry per evaluation) stops now, or None to go on.

  tc.stop_accuracy > 0: stop once the accuracy is at least that at
  tc.stop_evals evaluations in a row. tc.plateau_evals > 0: stop once the
  best accuracy of the last plateau_evals evaluations is not above the best
  before them by more than tc.plateau_delta (the curve has flattened).
  """
  accs = [a for _, a in curve]
  target, n = tc.get("stop_accuracy", 0.0), tc.get("stop_evals", 2)
  if target > 0 and len(accs) >= n and min(accs[-n:]) >= target:
    return f"accuracy >= {target} at {n} evaluations in a row"
  window = tc.get("plateau_evals", 0)
  if window > 0 and len(accs) > window:
    before, recent = max(accs[:-window]), max(accs[-window:])
    if recent <= before + tc.get("plateau_delta", 0.0):
      return (
          f"plateau: best accuracy of the last {window} evaluations "
          f"{recent:.4f}, best before {before:.4f}"
      )
  return None


@dataclasses.dataclass
class LoopResult:
  """What `train_loop` ends with; runs are indices into its `configs`.

  state: the (stacked) TrainState after the last step trained.
  step: the number of steps trained, counted from the first (not the resume).
  last_loss: each run's last finite training loss (None if it had none).
  evals: each run's held-out metrics at its last evaluation.
  diverged: a diagnosis for each run whose loss became NaN or inf.
  curves: each run's held-out accuracy curve, [(step, accuracy)], from the
    first step (a resumed run's curve starts with the one passed in).
  stopped: {run: (step, reason)} for each run that stopped early
    (`stop_reason`); its state is the one passed to on_stop at that step.
  test_curves: each run's test accuracy at each evaluation, [(step,
    accuracy)], where its evaluations score the test set too (else empty).
  """

  state: TrainState
  step: int
  last_loss: list
  evals: dict
  diverged: dict
  curves: dict = dataclasses.field(default_factory=dict)
  stopped: dict = dataclasses.field(default_factory=dict)
  test_curves: dict = dataclasses.field(default_factory=dict)

  def run_step(self, run: int) -> int:
    """The steps run `run` trained: to its early stop, or all of `step`."""
    return self.stopped[run][0] if run in self.stopped else self.step


def divergence(
    loss: float, step: int, last_loss: float | None, grad_norm: float, lr: float
) -> str:
  """The diagnosis of a run whose training loss became `loss` at `step`."""
  return (
      f"loss became {loss} at step {step} (last finite loss {last_loss}, "
      f"grad norm {grad_norm:.3g}, lr {lr:.3g}); lower --config.train.lr "
      f"or --config.train.grad_clip, or use a res_ln variant"
  )


def train_loop(
    state: TrainState,
    step_fn: Callable,
    batch_at: Callable,
    configs: list,
    *,
    evaluate: Callable,
    start_step: int = 0,
    last_loss: list | None = None,
    on_log: Callable | None = None,
    on_eval: Callable | None = None,
    on_stop: Callable | None = None,
    save: Callable | None = None,
    curves: dict | None = None,
    test_curves: dict | None = None,
    resumed: dict | None = None,
    name: str = "",
) -> LoopResult:
  """The training loop of one run (`train_and_evaluate`) and of a vmapped sweep
  group (`ut.experiments.sweep.train_group`); returns a `LoopResult`.

  Args:
    state: the TrainState, placed on the devices; for R runs trained at once,
      each leaf has a leading axis of R >= len(configs) (runs past the configs
      pad the run axis and are ignored).
    step_fn: the placed (jitted) step, (state, batch) -> (state, metrics):
      `train_step` or a vmap of it, whose metrics every process can read.
    batch_at: step (0-based) -> that step's placed batch (`train_batch`).
    configs: the configs of the runs. They share train.steps,
      train.log_every, train.checkpoint_every and eval.every.
    evaluate: (state, runs) -> {run: `evaluation` of that run}, run over
      the runs still training every eval.every steps and after the last.
    start_step: the step to resume at (a checkpoint's); last_loss: each run's
      last logged loss before it.
    on_log: (run, row) for each run still training, every train.log_every
      steps; the row has step, loss, accuracy, grad_norm, lr, steps_per_sec.
    on_eval: (run, step, metrics) after each evaluation.
    on_stop: (run, step, state) when a run stops early, with the state of
      that step (for a group: take the run's share before training goes on).
    save: (step, state, progress), every train.checkpoint_every steps, after
      the last, and when the last run training stops early; progress is what
      a resumed group needs besides the state, a JSON-safe dict of last_loss,
      curves, test_curves, evals, stopped and diverged (runs keyed by their
      index).
    curves: {run: [(step, accuracy)]}, the held-out curve before start_step
      (a resumed run's, so that early stopping sees all of it); test_curves:
      the same of the test accuracy, for runs whose evaluations score it
      (a metrics dict with test_accuracy).
    resumed: a saved progress's evals, stopped and diverged (runs keyed by
      int): the runs that stopped or diverged before start_step train no
      more and keep that record.
    name: a prefix for the log lines.

  A run whose loss becomes NaN or inf stops counting: its diagnosis goes to
  `diverged`. A run stops early when its config's rule says so after an
  evaluation (`stop_reason`: train.stop_accuracy, train.plateau_evals). The
  loop ends when no run is left training. This is the one place where every
  path through training decides what a run's step, log line, evaluation and
  end are.
  """
  first = configs[0]
  steps, log_every = first.train.steps, first.train.log_every
  eval_every, save_every = first.eval.every, first.train.checkpoint_every
  schedules = [optimizer.lr_schedule(c.train, c.train.lr) for c in configs]
  last_loss = list(last_loss or [None] * len(configs))
  resumed = resumed or {}
  diverged = dict(resumed.get("diverged", {}))
  evals = dict(resumed.get("evals", {}))
  stopped = dict(resumed.get("stopped", {}))
  curves = {i: list((curves or {}).get(i, [])) for i in range(len(configs))}
  test_curves = {
      i: list((test_curves or {}).get(i, [])) for i in range(len(configs))
  }
  training = [
      i for i in range(len(configs)) if i not in stopped and i not in diverged
  ]
  prefix = f"{name}: " if name else ""
  done, t_last, s_last = start_step, time.perf_counter(), start_step

  def stop_finished(state):
    """Takes the runs whose curve says stop out of `training`."""
    for i in list(training):
      reason = stop_reason(configs[i].train, curves[i])
      if reason:
        stopped[i] = (curves[i][-1][0], reason)
        training.remove(i)
        logging.info(
            "%srun %d (seed %d) stops at step %d: %s",
            prefix,
            i,
            configs[i].seed,
            stopped[i][0],
            reason,
        )
        if on_stop is not None:
          on_stop(i, stopped[i][0], state)

  stop_finished(state)  # A resumed run may have stopped before.
  for step in range(start_step, steps if training else start_step):
    state, metrics = step_fn(state, batch_at(step))
    loss = np.asarray(metrics["loss"]).reshape(-1)
    for i in [i for i in training if not np.isfinite(loss[i])]:
      diverged[i] = divergence(
          float(loss[i]),
          step + 1,
          last_loss[i],
          float(np.asarray(metrics["grad_norm"]).reshape(-1)[i]),
          float(schedules[i](step)),
      )
      training.remove(i)
      if len(configs) > 1:  # One run raises (`train_and_evaluate`).
        logging.warning(
            "%srun %d (seed %d) diverged: %s",
            prefix,
            i,
            configs[i].seed,
            diverged[i],
        )
    if not training:
      break
    for i in training:
      last_loss[i] = float(loss[i])
    done = step + 1
    if done % log_every == 0 or done == steps:
      now = time.perf_counter()
      rate = (done - s_last) / max(now - t_last, 1e-9)
      t_last, s_last = now, done
      values = jax.tree.map(lambda a: np.asarray(a).reshape(-1), metrics)
      rows = {
          i: dict(
              step=done,
              loss=last_loss[i],
              accuracy=float(values["correct"][i])
              / max(int(values["count"][i]), 1),
              grad_norm=float(values["grad_norm"][i]),
              lr=float(schedules[i](step)),
              steps_per_sec=rate,
          )
          for i in training
      }
      for i, row in rows.items():
        if on_log is not None:
          on_log(i, row)
      logging.info(
          "%sstep %d/%d loss %.4f acc %.3f | %.1f steps/s, ETA %.0fs",
          prefix,
          done,
          steps,
          np.mean([r["loss"] for r in rows.values()]),
          np.mean([r["accuracy"] for r in rows.values()]),
          rate,
          (steps - done) / rate,
      )
    if done % eval_every == 0 or done == steps:
      evals.update(_evaluate(evaluate, state, training, done, on_eval, prefix))
      for i in training:
        curves[i].append((done, evals[i]["accuracy"]))
        if "test_accuracy" in evals[i]:
          test_curves[i].append((done, evals[i]["test_accuracy"]))
      stop_finished(state)
    if save is not None and (
        done % save_every == 0 or done == steps or not training
    ):
      progress = dict(
          last_loss=last_loss,
          curves=curves,
          test_curves=test_curves,
          evals=evals,
          stopped=stopped,
          diverged=diverged,
      )
      save(done, state, json.loads(json.dumps(progress, default=float)))
    if not training:
      break
  # Nothing trained here (a finished or stopped run resumed): evaluate the
  # checkpoint.
  unscored = [i for i in range(len(configs)) if i not in diverged | evals]
  if unscored:
    evals.update(_evaluate(evaluate, state, unscored, done, None, prefix))
  return LoopResult(
      state=state,
      step=done,
      last_loss=last_loss,
      evals=evals,
      diverged=diverged,
      curves=curves,
      stopped=stopped,
      test_curves=test_curves,
  )


def _evaluate(evaluate, state, runs, step, on_eval, prefix):
  """evaluate(state, runs), each run's result passed to on_eval and logged."""
  evals = evaluate(state, runs)
  for i, metrics in evals.items():
    if on_eval is not None:
      on_eval(i, step, metrics)
  logging.info(
      "%seval at step %d: accuracy %s loss %s",
      prefix,
      step,
      " ".join(f"{evals[i]['accuracy']:.4f}" for i in runs),
      " ".join(f"{evals[i]['loss']:.4f}" for i in runs),
  )
  return evals


def trainable_count(params: dict, labels: dict) -> int:
  """How many parameters the optimizer updates (those labelled 'train')."""
  return sum(
      int(np.prod(p.shape))
      for p, l in zip(jax.tree.leaves(params), jax.tree.leaves(labels))
      if l == "train"
  )


def run_summary(
    config,
    spec,
    params: dict,
    result: LoopResult,
    run: int,
    task=None,
    labels: dict | None = None,
) -> dict:
  """The final metrics of run `run` of a `LoopResult`, with its `params`;
  with `task`, its fixed test set's too (`test_metrics`).

  step is where the run ended (its early stop, `stop_reason`, or the last
  step); curve its held-out accuracy at each evaluation, and steps_to_99 the
  first evaluated step at which that reached 99% (None if never). Where the
  evaluations scored the test set too (config.eval.test_each), test_curve
  holds its accuracy at each, and test_at_best_valid the step of the first
  evaluation of highest held-out accuracy, that accuracy and the test
  accuracy there: the score of early stopping by validation, beside
  test_accuracy at the end. labels: `models.labels` of params (None:
  computed here)."""
  labels = models.labels(params, spec) if labels is None else labels
  curve = result.curves.get(run, [])
  test_curve = result.test_curves.get(run, [])
  chosen = {}
  if test_curve:
    best_step, best = max(curve, key=lambda point: point[1])  # The first.
    chosen = dict(
        test_curve=[[s, a] for s, a in test_curve],
        test_at_best_valid=dict(
            step=best_step,
            valid_accuracy=best,
            test_accuracy=dict(test_curve)[best_step],
        ),
    )
  return dict(
      step=result.run_step(run),
      stopped_early=result.stopped.get(run, (None, None))[1],
      steps_to_99=next((s for s, a in curve if a >= 0.99), None),
      curve=[[s, a] for s, a in curve],
      eval_accuracy=result.evals[run]["accuracy"],
      **(held_out.test_metrics(params, spec, config, task) if task else {}),
      eval_loss=result.evals[run]["loss"],
      final_train_loss=result.last_loss[run],
      param_checksum=param_checksum(params),
      task=config.task,
      kind=spec.kind,
      variant=spec.variant,
      model_width=spec.model_width,
      trainable_params=trainable_count(params, labels),
      **chosen,
  )


def param_checksum(params: dict) -> float:
  """A float64 sum over all parameters: equal runs give equal checksums."""
  return float(
      sum(np.asarray(p, np.float64).sum() for p in jax.tree.leaves(params))
  )
