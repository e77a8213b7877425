"""Training fixed UTs: only E and U move (DESIGN §7).

`train_and_evaluate(config, workdir)` trains, evaluates on held-out data from a
disjoint seed stream, writes metrics (TensorBoard events, CSV, JSON) and orbax
checkpoints, and resumes from the latest checkpoint in the workdir. Batches are
a pure function of (seed, step), so a resumed run is bit-identical to an
uninterrupted one.

The parts, in the order a step meets them:
  optimizer.py   AdamW on the 'train' leaves, its schedule, the update
  step.py        the jitted step, on one device or data parallel
  implementation.py  the model's implementation switch and the step's
                 options on XLA CPU (the one place training meets ut/cpu)
  held_out.py    held-out and test evaluation
  loop.py        the loop of one run or a vmapped group, early stopping
  checkpoint.py  what a checkpoint holds, the initial state, restores
  records.py     config.json, the CSV logs, TensorBoard events
"""

import os

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from ut.errors import UserError
from ut.io import reports
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out
from ut.training import loop
from ut.training import models
from ut.training import optimizer
from ut.training import precision as precision_lib
from ut.training import records
from ut.training import step as step_lib


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains config.model on config.task; returns the final metrics dict.
  Every step runs at config.precision (ut.training.precision)."""
  with precision_lib.scope(config):
    return _train_and_evaluate(config, workdir)


def _train_and_evaluate(config, workdir):
  task = data_lib.make_task(config)
  spec = models.model_spec(config, task.info)  # Validate before the workdir.
  optimizer.check_schedule(config)
  step_lib.check_data_parallel(config)
  state, tx, _ = checkpoint.init_state(config, spec)  # Reads init_params.
  labels = models.labels(state.params, spec)  # Carried from here on.
  reports.check_folder(workdir, "--workdir")
  os.makedirs(workdir, exist_ok=True)
  records.check_workdir_config(config, workdir)
  logging.info(
      "model %s/%s width %d: %d trainable of %d parameters",
      spec.kind,
      spec.variant,
      spec.model_width,
      loop.trainable_count(state.params, labels),
      sum(int(np.prod(p.shape)) for p in jax.tree.leaves(state.params)),
  )
  mngr = checkpoint.checkpoint_manager(workdir)
  start_step = mngr.latest_step() or 0
  if start_step:
    state = checkpoint.restore_checkpoint(mngr, start_step, state, labels)
    logging.info("resumed from checkpoint at step %d", start_step)
  frozen_sums = os.path.join(workdir, checkpoint.FROZEN_SUMS)
  try:  # Before the logs drop their rows past the checkpoint.
    checkpoint.check_frozen(frozen_sums, state.params, labels)
  except UserError:
    mngr.close()
    raise
  train_log = records.CsvLog(
      os.path.join(workdir, "train_metrics.csv"), start_step
  )
  eval_log = records.CsvLog(
      os.path.join(workdir, "eval_metrics.csv"), start_step
  )
  writer = records.summary_writer(workdir)
  step_fn, place_state, place_batch = step_lib.make_step(
      config, spec, tx, labels
  )
  valid = held_out.eval_batches(config, task)
  tested = held_out.test_batches(config, task)
  eval_mesh = step_lib.batch_mesh() if config.train.data_parallel else None

  def on_log(_, row):
    train_log.write(row)
    records.scalars(writer, "train", row)

  def on_eval(_, step, metrics):
    eval_log.write(dict(step=step, **metrics))
    records.scalars(writer, "eval", dict(step=step, **metrics))

  try:  # Finish an in-flight async save and close the log even on errors.
    result = loop.train_loop(
        place_state(state),
        step_fn,
        lambda step: place_batch(data_lib.train_batch(config, task, step)),
        [config],
        evaluate=lambda state, runs: {
            0: held_out.evaluation(state.params, spec, valid, tested, eval_mesh)
        },
        start_step=start_step,
        last_loss=[train_log.last_loss],
        curves={0: eval_log.curve()},
        test_curves={0: eval_log.curve("test_accuracy")},
        on_log=on_log,
        on_eval=on_eval,
        save=lambda step, state, _: mngr.save(
            step,
            args=ocp.args.StandardSave(checkpoint.checkpointed(state, labels)),
        ),
    )
  finally:
    mngr.wait_until_finished()
    mngr.close()
    if writer is not None:
      writer.close()
  if result.diverged:
    raise loop.TrainingDiverged(result.diverged[0])
  final = dict(
      loop.run_summary(
          config, spec, result.state.params, result, 0, task, labels
      ),
      provenance=reports.provenance(config),
  )
  reports.write_json(os.path.join(workdir, "metrics.json"), final)
  return final
