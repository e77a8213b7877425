"""ut.experiments.sweep.groups: a vmapped group gives the metrics of its runs
done one by one, keeps each run's UT, stops and resumes as one run does."""

import contextlib
import json
import os
from unittest import mock

from absl.testing import absltest
import jax
import ml_collections
import numpy as np

from tests import sweep_config
from ut.errors import UserError
from ut.experiments import sweep
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out
from ut.training import implementation
from ut.training import loop
from ut.training import models
from ut.training import step as step_lib
from ut.training import train


def steps_evaluated(config):
  """How many times a run of `config` is evaluated: every eval.every steps and
  after the last."""
  steps, every = config.train.steps, config.eval.every
  return steps // every + (steps % every != 0)


class SweepTest(absltest.TestCase):

  def test_vmapped_group_keeps_each_runs_ut_seed(self):
    # model.ut_seed may differ within a group: each run has its own frozen UT.
    configs = []
    for ut_seed in (0, 1):
      config = sweep_config.get_config("model=random,smoke")
      config.model.ut_seed = ut_seed
      configs.append(config)
    self.assertEqual(sweep.group_key(configs[0]), sweep.group_key(configs[1]))
    # The group and a single run go through the same loop, step, batches and
    # evaluation (every eval.every steps, for each run).
    # Each function in the module that defines it, where the group and the
    # single run both reach it: one spy for both.
    homes = dict(
        train_loop=loop,
        train_step=step_lib,
        train_batch=data_lib,
        held_out_metrics=held_out,
    )
    shared = tuple(homes)
    calls = {}
    with contextlib.ExitStack() as stack:
      spied = {}
      for name, home in homes.items():
        spied[name] = mock.MagicMock(wraps=getattr(home, name))
        stack.enter_context(mock.patch.object(home, name, spied[name]))
      got = sweep.train_group(configs)
      calls["group"] = {name: spied[name].call_count for name in shared}
      for spy in spied.values():
        spy.reset_mock()
      tmp = self.create_tempdir().full_path
      wants = [
          train.train_and_evaluate(config, os.path.join(tmp, str(i)))
          for i, config in enumerate(configs)
      ]
      calls["single"] = {name: spied[name].call_count for name in shared}
    for path in ("group", "single"):
      for name in shared:
        self.assertGreater(calls[path][name], 0, (path, name))
    steps, evals = configs[0].train.steps, steps_evaluated(configs[0])
    padded = len(configs) + -len(configs) % jax.device_count()
    self.assertEqual(calls["group"]["train_batch"], steps * padded)
    # And once more per run at the end: the fixed test set (held_out.test_metrics).
    for path in ("group", "single"):
      self.assertEqual(
          calls[path]["held_out_metrics"], (evals + 1) * len(configs), path
      )
    for i, (result, want) in enumerate(zip(got, wants)):
      np.testing.assert_allclose(
          result["param_checksum"],
          want["param_checksum"],
          rtol=1e-5,
          err_msg=str(i),
      )
      np.testing.assert_allclose(
          result["final_train_loss"],
          want["final_train_loss"],
          rtol=1e-4,
          err_msg=str(i),
      )
      np.testing.assert_allclose(
          result["test_accuracy"],
          want["test_accuracy"],
          rtol=1e-6,
          err_msg=str(i),
      )

  def test_vmapped_group_with_microbatches(self):
    # On CPU a table-sized step splits its batch (a lax.scan over parts);
    # vmapped over a group's runs it once failed on the mesh's "runs" axis.
    configs = [
        sweep_config.get_config(f"model=sparse,variant=attn,smoke,seed={s}")
        for s in (0, 1)
    ]
    tmp = self.create_tempdir().full_path
    split = mock.patch.object(
        implementation, "microbatches", return_value=2, autospec=True
    )
    with split as rule:
      got = sweep.train_group(configs)
      self.assertGreater(rule.call_count, 0)
      wants = [
          train.train_and_evaluate(config, os.path.join(tmp, str(i)))
          for i, config in enumerate(configs)
      ]
    for i, (result, want) in enumerate(zip(got, wants)):
      np.testing.assert_allclose(
          result["param_checksum"], want["param_checksum"], rtol=1e-5
      )
      self.assertEqual(result["test_accuracy"], want["test_accuracy"], i)

  def test_an_interrupted_group_resumes_from_its_checkpoint(self):
    """A group stopped at step 9 (after its checkpoint at step 8) and run
    again ends as the same group run through: the same params, curves and
    scores for both runs, run 0 having stopped early (at step 4) before the
    interruption."""
    configs = []
    for ut_seed, lr in enumerate((1e-3, 2e-3)):
      config = sweep_config.get_config("model=random,smoke")
      config.train.update(steps=12, lr=lr, schedule="constant")
      config.model.ut_seed = ut_seed  # Each run's frozen UT is its own.
      config.eval.test_each = True  # Test curves resume too.
      configs.append(config)
    self.assertEqual(configs[0].train.checkpoint_every, 2)
    rule = lambda tc, curve: (
        "test stop" if tc.lr == 1e-3 and len(curve) >= 2 else None
    )
    batch = data_lib.train_batch

    def interrupted(config, task, step):
      if step == 9:
        raise KeyboardInterrupt
      return batch(config, task, step)

    folder = os.path.join(self.create_tempdir().full_path, "group")
    with mock.patch.object(loop, "stop_reason", rule):
      want = sweep.train_group(configs)
      # The sweep reaches the batches and the loop through their modules.
      with mock.patch.object(data_lib, "train_batch", interrupted):
        with self.assertRaises(KeyboardInterrupt):
          sweep.train_group(configs, folder)
      # Only the trained leaves are kept (E and U): the frozen UT is redrawn.
      with np.load(os.path.join(folder, "stopped_0.npz")) as saved:
        spec = models.model_spec(
            configs[0], data_lib.make_task(configs[0]).info
        )
        params = checkpoint.init_state(configs[0], spec)[0].params
        trained = [
            p.shape
            for p, l in zip(
                jax.tree.leaves(params),
                jax.tree.leaves(models.labels(params, spec)),
            )
            if l == "train"
        ]
        self.assertEqual([saved[k].shape for k in saved.files], trained)
        self.assertLess(len(trained), len(jax.tree.leaves(params)))
      with mock.patch.object(
          loop, "train_loop", wraps=loop.train_loop
      ) as looped:
        got = sweep.train_group(configs, folder)
    self.assertEqual(looped.call_args.kwargs["start_step"], 8)
    self.assertEqual(
        looped.call_args.kwargs["resumed"]["stopped"], {0: (4, "test stop")}
    )
    for i in range(2):
      self.assertEqual(got[i].pop("resumed_at_step"), 8)
      self.assertEqual(got[i], want[i], i)
      self.assertEqual(
          [s for s, _ in got[i]["test_curve"]], [s for s, _ in got[i]["curve"]]
      )
    self.assertEqual([r["step"] for r in got], [4, 12])
    # Run 1's last evaluation is its end: the test score recorded there is
    # the one `held_out.test_metrics` gives its final params.
    self.assertEqual(got[1]["test_curve"][-1][1], got[1]["test_accuracy"])
    # Frozen UTs other than those it trained with (as after a change in the
    # code that draws them) are refused: the folder's frozen sums differ.
    sums_path = os.path.join(folder, checkpoint.FROZEN_SUMS)
    with open(sums_path) as f:
      sums = json.load(f)
    self.assertIn("layers/wq", sums)
    sums["layers/wq"] = 2 * sums["layers/wq"] + 1
    with open(sums_path, "w") as f:
      json.dump(sums, f)
    with self.assertRaisesRegex(UserError, r"frozen leaf layers/wq"):
      sweep.train_group(configs, folder)
    # Another group's shapes cannot resume from this folder's checkpoint: a
    # one-line error (without the frozen sums, which would refuse it first).
    os.remove(sums_path)
    wider = [c.copy_and_resolve_references() for c in configs]
    for c in wider:
      c.model.m *= 2
    with self.assertRaisesRegex(UserError, r"holds a checkpoint this group"):
      sweep.train_group(wider, folder)

  def test_group_folder_names_the_runs_not_the_host_settings(self):
    configs = [
        sweep_config.get_config(f"model=random,smoke,seed={s}") for s in (0, 1)
    ]
    folder = sweep.group_folder("W", configs)
    self.assertEqual(os.path.dirname(folder), os.path.join("W", "groups"))
    host = [c.copy_and_resolve_references() for c in configs]
    host[0].cpu = ml_collections.ConfigDict(dict(microbatches=3))
    self.assertEqual(sweep.group_folder("W", host), folder)
    other = [c.copy_and_resolve_references() for c in configs]
    other[1].train.lr *= 2
    self.assertNotEqual(sweep.group_folder("W", other), folder)
    self.assertNotEqual(sweep.group_folder("W", configs[::-1]), folder)

  def test_a_run_that_stops_early_in_a_group_keeps_its_params(self):
    """Run 0 stops at the second evaluation while run 1 and the vmapped
    group's state train on: run 0 keeps its params of that step, those of a
    lone constant-lr run that long; run 1 those of a full-length run. The
    rule is patched to name run 0 by its lr (`stop_reason` is tested alone in
    tests/training/loop_test.py)."""
    configs = []
    for lr in (1e-3, 2e-3):
      config = sweep_config.get_config("model=random,smoke")
      config.train.update(steps=12, lr=lr, schedule="constant")
      configs.append(config)
    rule = lambda tc, curve: (
        "test stop" if tc.lr == 1e-3 and len(curve) >= 2 else None
    )
    with mock.patch.object(loop, "stop_reason", rule):
      got = sweep.train_group(configs)
    every = configs[0].eval.every
    tmp = self.create_tempdir().full_path
    for i, steps in ((0, 2 * every), (1, 12)):
      lone = configs[i].copy_and_resolve_references()
      lone.train.steps = steps
      want = train.train_and_evaluate(lone, os.path.join(tmp, str(i)))
      self.assertEqual(got[i]["step"], steps)
      np.testing.assert_allclose(
          got[i]["param_checksum"], want["param_checksum"], rtol=1e-5
      )
      self.assertEqual(
          [s for s, _ in got[i]["curve"]], list(range(every, steps + 1, every))
      )
      np.testing.assert_allclose(
          got[i]["test_accuracy"], want["test_accuracy"], rtol=1e-6
      )
    self.assertEqual(got[0]["stopped_early"], "test stop")
    self.assertIsNone(got[1]["stopped_early"])


if __name__ == "__main__":
  absltest.main()
