"""The real training loop (STYLE 13): outputs, frozen leaves, determinism, resume.

In-process tests call `train.train_and_evaluate(smoke_config, tmpdir)`; the
command-line tests run `python -m launch.train` as a user would, including a
SIGKILL in the middle of a run followed by a resume.
"""

import csv
import dataclasses
import functools
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import cpu as cpu_config
from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import cli_helpers
from tests import xla_settings
from ut.cpu import host
from ut.errors import UserError
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out
from ut.training import implementation
from ut.training import loop
from ut.training import models
from ut.training import optimizer
from ut.training import records
from ut.training import step as step_lib
from ut.training import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"dyck": dyck_config, "khop": khop_config}
# What a resumed or repeated run must reproduce exactly.
FINAL_KEYS = (
    "step",
    "eval_accuracy",
    "eval_loss",
    "final_train_loss",
    "param_checksum",
)
TRAIN_COLUMNS = (
    "step",
    "loss",
    "accuracy",
    "grad_norm",
    "lr",
)  # Not steps_per_sec.


def smoke_config(task="dyck", arg="", **train_overrides):
  config = CONFIGS[task].get_config(",".join(filter(None, ["smoke", arg])))
  config.train.update(train_overrides)
  return config


def read_csv(path, columns=None):
  with open(path) as f:
    rows = list(csv.DictReader(f))
  if columns is not None:
    rows = [{c: r[c] for c in columns} for r in rows]
  return rows


def read_json(path):
  with open(path) as f:
    return json.load(f)


def leaves_by_name(tree, convert=np.asarray):
  flat, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {"/".join(str(k.key) for k in path): convert(v) for path, v in flat}


def labels_by_name(params, spec):
  return leaves_by_name(models.labels(params, spec), convert=str)


def initial_params(config):
  """The parameters a run starts from, built independently of its workdir."""
  spec = models.model_spec(config, data_lib.make_task(config).info)
  state, _, _ = checkpoint.init_state(config, spec)
  return leaves_by_name(state.params)


def train_command(workdir, *overrides, config="configs/dyck.py:smoke"):
  return [
      sys.executable,
      "-m",
      "launch.train",
      f"--config={config}",
      f"--workdir={workdir}",
      *overrides,
  ]


def run_train(workdir, *overrides, config="configs/dyck.py:smoke"):
  return subprocess.run(
      train_command(workdir, *overrides, config=config),
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      check=False,
  )


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  @parameterized.parameters("dyck", "khop")
  def test_smoke_run_writes_outputs_and_rerun_keeps_them(self, task):
    config = smoke_config(task)
    workdir = self.create_tempdir().full_path
    final = train.train_and_evaluate(config, workdir)
    steps = config.train.steps

    metrics = read_json(os.path.join(workdir, "metrics.json"))
    self.assertEqual(metrics["step"], steps)
    for key in FINAL_KEYS:
      self.assertEqual(metrics[key], final[key], key)
      self.assertTrue(np.isfinite(metrics[key]), (key, metrics[key]))
    self.assertBetween(metrics["eval_accuracy"], 0.0, 1.0)
    self.assertEqual(metrics["task"], task)
    self.assertIn("git_commit", metrics["provenance"])

    train_rows = read_csv(os.path.join(workdir, "train_metrics.csv"))
    self.assertEqual(
        list(train_rows[0]),
        ["step", "loss", "accuracy", "grad_norm", "lr", "steps_per_sec"],
    )
    log_steps = list(
        range(config.train.log_every, steps + 1, config.train.log_every)
    )
    self.assertEqual([int(r["step"]) for r in train_rows], log_steps)
    self.assertEqual(float(train_rows[-1]["loss"]), metrics["final_train_loss"])
    eval_rows = read_csv(os.path.join(workdir, "eval_metrics.csv"))
    self.assertEqual(
        [int(r["step"]) for r in eval_rows],
        list(range(config.eval.every, steps + 1, config.eval.every)),
    )
    self.assertEqual(float(eval_rows[-1]["accuracy"]), metrics["eval_accuracy"])
    self.assertNotEmpty(
        glob.glob(os.path.join(workdir, "tb", "events.out.tfevents.*"))
    )
    self.assertContainsSubset(
        {str(steps)}, set(os.listdir(os.path.join(workdir, "checkpoints")))
    )
    self.assertEqual(
        read_json(os.path.join(workdir, "config.json")),
        json.loads(config.to_json_best_effort()),
    )

    # Running the finished command again resumes at the last step: nothing to
    # train, and the same final metrics (not a final_train_loss of None).
    with open(os.path.join(workdir, "train_metrics.csv")) as f:
      train_csv = f.read()
    again = train.train_and_evaluate(config, workdir)
    for key in FINAL_KEYS:
      self.assertEqual(again[key], final[key], key)
    self.assertEqual(
        read_json(os.path.join(workdir, "metrics.json"))["final_train_loss"],
        final["final_train_loss"],
    )
    with open(os.path.join(workdir, "train_metrics.csv")) as f:
      self.assertEqual(f.read(), train_csv)

  def test_early_stop_equals_a_run_of_that_many_steps(self):
    """A constant-lr run stopped early (the plateau rule, which with
    plateau_delta=1 fires at the second evaluation) ends with the params of
    an uninterrupted run of that many steps; resuming it trains no more."""
    every = 2
    stopping = smoke_config(
        steps=12,
        schedule="constant",
        plateau_evals=1,
        plateau_delta=1.0,
    )
    stopping.eval.every = every
    workdir = self.create_tempdir().full_path
    got = train.train_and_evaluate(stopping, workdir)
    self.assertEqual(got["step"], 2 * every)
    self.assertStartsWith(got["stopped_early"], "plateau")
    self.assertEqual([s for s, _ in got["curve"]], [every, 2 * every])
    self.assertEqual(
        sorted(os.listdir(os.path.join(workdir, "checkpoints")))[-1],
        str(2 * every),
    )
    short = smoke_config(steps=2 * every, schedule="constant")
    short.eval.every = every
    want = train.train_and_evaluate(short, self.create_tempdir().full_path)
    for key in FINAL_KEYS:
      self.assertEqual(got[key], want[key], key)
    self.assertEqual(got["curve"], want["curve"])
    self.assertIsNone(want["stopped_early"])
    # Resumed, the run sees its whole curve and stops where it was.
    again = train.train_and_evaluate(stopping, workdir)
    for key in FINAL_KEYS + ("curve", "stopped_early"):
      self.assertEqual(again[key], got[key], key)

  def test_test_at_best_valid_is_a_run_stopped_there(self):
    """With eval.test_each every evaluation scores the test set too, and
    test_at_best_valid holds the test accuracy at the first evaluation of
    best held-out accuracy: what a constant-lr run of that many steps scores
    on the test set at its end (`test_metrics` on its final params)."""
    config = smoke_config("khop", steps=12, schedule="constant", lr=0.05)
    config.eval.update(every=2, test_each=True)
    workdir = self.create_tempdir().full_path
    got = train.train_and_evaluate(config, workdir)
    rows = read_csv(os.path.join(workdir, "eval_metrics.csv"))
    self.assertEqual(
        got["test_curve"],
        [[int(r["step"]), float(r["test_accuracy"])] for r in rows],
    )
    self.assertEqual(got["test_curve"][-1][1], got["test_accuracy"])
    valid = [float(r["accuracy"]) for r in rows]
    best = got["test_at_best_valid"]
    self.assertEqual(best["step"], int(rows[valid.index(max(valid))]["step"]))
    self.assertEqual(best["valid_accuracy"], max(valid))
    short = smoke_config(
        "khop", steps=best["step"], schedule="constant", lr=0.05
    )
    short.eval.every = 2
    want = train.train_and_evaluate(short, self.create_tempdir().full_path)
    self.assertEqual(best["test_accuracy"], want["test_accuracy"])
    self.assertNotIn("test_at_best_valid", want)  # Off by default.

  @parameterized.named_parameters(
      ("off", dict(), [0.1, 0.2, 0.2, 0.2], False),
      ("accuracy_twice", dict(stop_accuracy=0.9), [0.5, 0.9, 0.95], True),
      ("accuracy_once", dict(stop_accuracy=0.9), [0.95, 0.5, 0.95], False),
      (
          "accuracy_three",
          dict(stop_accuracy=0.9, stop_evals=3),
          [0.5, 0.91, 0.92],
          False,
      ),
      (
          "plateau",
          dict(plateau_evals=2, plateau_delta=0.01),
          [0.5, 0.8, 0.805, 0.79],
          True,
      ),
      (
          "rising",
          dict(plateau_evals=2, plateau_delta=0.01),
          [0.5, 0.8, 0.79, 0.82],
          False,
      ),
      ("too_short", dict(plateau_evals=2), [0.5, 0.5], False),
  )
  def test_stop_reason(self, rules, accs, stops):
    tc = smoke_config().train
    tc.update(rules)
    curve = [(100 * (i + 1), a) for i, a in enumerate(accs)]
    self.assertEqual(loop.stop_reason(tc, curve) is not None, stops)

  def test_constant_schedule_keeps_the_peak(self):
    tc = smoke_config(steps=100, warmup_steps=10, schedule="constant").train
    schedule = optimizer.lr_schedule(tc, 0.5)
    self.assertAlmostEqual(float(schedule(5)), 0.25)
    for step in (10, 50, 99, 1000):
      self.assertAlmostEqual(float(schedule(step)), 0.5)

  @parameterized.parameters("sparse", "random", "trained")
  def test_dyck_loss_reads_the_last_position_only(self, kind):
    """Dyck's spec computes the last position only (TaskInfo.labels_last_only);
    its loss, counts and gradients equal those of the full forward."""
    config = smoke_config(arg=f"model={kind},variant=res_ln_mlp")
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    self.assertTrue(spec.last_only)
    self.assertFalse(
        models.model_spec(
            smoke_config("khop"), data_lib.make_task(smoke_config("khop")).info
        ).last_only
    )
    full = dataclasses.replace(spec, last_only=False)
    params = checkpoint.init_state(config, spec)[0].params
    batch = data_lib.train_batch(config, task, 0)
    grad = lambda s: jax.grad(
        lambda p: step_lib.loss_and_metrics(p, s, batch)[0]
    )(params)
    got, want = (
        step_lib.loss_and_metrics(params, s, batch)[1] for s in (spec, full)
    )
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
    self.assertEqual(int(got["correct"]), int(want["correct"]))
    self.assertEqual(int(got["count"]), int(want["count"]))
    chex.assert_trees_all_close(grad(spec), grad(full), rtol=2e-4, atol=1e-6)

  def test_frozen_leaves_are_bit_identical_after_training(self):
    config = smoke_config(arg="model=random,variant=res_ln_mlp")
    workdir = self.create_tempdir().full_path
    final = train.train_and_evaluate(config, workdir)
    params, spec, _, _, step = checkpoint.restore_params(workdir)
    self.assertEqual(step, config.train.steps)
    # The checkpoint keeps no frozen leaf (restore_params takes them from the
    # initial state); the trained state's checksum covers them all.
    self.assertEqual(loop.param_checksum(params), final["param_checksum"])
    before, after = initial_params(config), leaves_by_name(params)
    self.assertEqual(set(before), set(after))
    labels = labels_by_name(params, spec)
    frozen = sorted(k for k, v in labels.items() if v == "frozen")
    self.assertEqual(
        frozen,
        [
            "layers/wk",
            "layers/wq",
            "layers/wv",
            "mlp/b1",
            "mlp/b2",
            "mlp/w1",
            "mlp/w2",
        ],
    )
    for name, label in labels.items():
      self.assertEqual(after[name].dtype, before[name].dtype, name)
      if label == "frozen":
        self.assertEqual(after[name].tobytes(), before[name].tobytes(), name)
      else:  # embed/token, embed/position, unembed all moved.
        self.assertFalse(np.array_equal(after[name], before[name]), name)

  def test_checkpoint_keeps_trainable_leaves_and_whole_state_ones_resume(self):
    """A checkpoint holds the step, the trainable leaves and the optimizer
    state, not the frozen UT; resuming from it, or from a checkpoint of the
    whole TrainState (the format before), ends as the uninterrupted run."""
    config = smoke_config(arg="model=random,variant=res_ln_mlp")
    self.assertEqual(
        (config.train.steps, config.train.checkpoint_every), (4, 2)
    )
    whole = self.create_tempdir("whole").full_path
    want = train.train_and_evaluate(config, whole)

    before = initial_params(config)
    trainable = ("embed/position", "embed/token", "unembed")
    mngr = checkpoint.checkpoint_manager(whole)
    tree = mngr.item_metadata(4).tree
    self.assertEqual(set(tree), {"step", "trainable", "opt_state"})
    self.assertEqual(
        sorted(tuple(a.shape) for a in tree["trainable"]),
        sorted(before[k].shape for k in trainable),
    )
    saved_bytes = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(os.path.join(whole, "checkpoints", "4"))
        for f in files
    )
    frozen_bytes = sum(
        v.nbytes for k, v in before.items() if k not in trainable
    )
    self.assertLess(saved_bytes, frozen_bytes)
    spec = models.model_spec(config, data_lib.make_task(config).info)
    initial = checkpoint.init_state(config, spec)[0]
    state = checkpoint.restore_checkpoint(
        mngr, 2, initial, models.labels(initial.params, spec)
    )
    mngr.close()

    def resume(name, save_step_2):
      workdir = self.create_tempdir(name).full_path
      shutil.copytree(whole, workdir, dirs_exist_ok=True)
      for gone in ("checkpoints/4", "metrics.json"):
        shutil.rmtree(os.path.join(workdir, gone), ignore_errors=True)
        if os.path.isfile(os.path.join(workdir, gone)):
          os.remove(os.path.join(workdir, gone))
      save_step_2(workdir)
      return train.train_and_evaluate(config, workdir)

    def whole_state(workdir):  # What checkpoints held before.
      shutil.rmtree(os.path.join(workdir, "checkpoints", "2"))
      old = checkpoint.checkpoint_manager(workdir)
      old.save(2, args=ocp.args.StandardSave(state))
      old.wait_until_finished()
      self.assertIn("layers", old.item_metadata(2).tree["params"])
      old.close()

    for got in (resume("compact", lambda _: None), resume("old", whole_state)):
      for key in FINAL_KEYS:
        self.assertEqual(got[key], want[key], key)

    # The run recorded its frozen leaves' sums; a resume onto another draw
    # (here: a sum changed by 1e-4 of itself) is refused and trains nothing.
    sums_path = os.path.join(whole, checkpoint.FROZEN_SUMS)
    sums = read_json(sums_path)
    self.assertEqual(
        sums,
        {
            k: float(v.astype(np.float64).sum())
            for k, v in before.items()
            if k not in trainable
        },
    )
    sums["layers/wv"] *= 1 + 1e-4
    with open(sums_path, "w") as f:
      json.dump(sums, f)
    shutil.rmtree(os.path.join(whole, "checkpoints", "4"))
    os.remove(os.path.join(whole, "metrics.json"))
    with open(os.path.join(whole, "train_metrics.csv")) as f:
      train_csv = f.read()
    with self.assertRaisesRegex(
        UserError, r"frozen_sums.json: the frozen leaf layers/wv this config"
    ):
      train.train_and_evaluate(config, whole)
    with open(os.path.join(whole, "train_metrics.csv")) as f:
      self.assertEqual(f.read(), train_csv)  # Rows past step 2 kept too.
    self.assertEqual(
        sorted(os.listdir(os.path.join(whole, "checkpoints"))), ["2"]
    )
    self.assertFalse(os.path.exists(os.path.join(whole, "metrics.json")))

  def test_trained_kind_updates_every_weight(self):
    config = smoke_config(arg="model=trained,variant=res_ln_mlp")
    workdir = self.create_tempdir().full_path
    train.train_and_evaluate(config, workdir)
    params, spec, _, _, _ = checkpoint.restore_params(workdir)
    self.assertEqual(set(labels_by_name(params, spec).values()), {"train"})
    before, after = initial_params(config), leaves_by_name(params)
    for name in (
        "layers/wq",
        "layers/wk",
        "layers/wv",
        "layers/wo",
        "mlp/w1",
        "mlp/b1",
        "mlp/w2",
        "mlp/b2",
        "embed/token",
        "unembed",
    ):
      self.assertFalse(np.array_equal(after[name], before[name]), name)

  @parameterized.parameters("sparse", "random")
  def test_microbatched_step_equals_whole_batch_step(self, kind):
    config = smoke_config(
        "khop", f"model={kind},variant=res_ln_mlp", batch_size=8
    )
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    state, tx, _ = checkpoint.init_state(config, spec)
    batch = data_lib.train_batch(config, task, 0)
    steps = [
        jax.jit(
            lambda s, b, n=n: step_lib.train_step(
                s, b, spec=spec, tx=tx, microbatches=n
            )
        )(state, batch)
        for n in (1, 4)
    ]
    (whole, whole_metrics), (parts, parts_metrics) = steps
    chex.assert_trees_all_close(
        parts.params, whole.params, atol=1e-5, rtol=1e-5
    )
    np.testing.assert_allclose(
        parts_metrics["loss"], whole_metrics["loss"], rtol=1e-5
    )
    self.assertEqual(int(parts_metrics["count"]), int(whole_metrics["count"]))

  @parameterized.parameters("sparse", "random")
  def test_microbatched_eval_equals_numpy_counts(self, kind):
    config = smoke_config("khop", f"model={kind},variant=res_ln_mlp")
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    params = checkpoint.init_state(config, spec)[0].params
    batch = held_out.eval_batches(config, task)[0]
    # Counted in numpy from the whole batch's logits.
    logits = np.asarray(models.apply(params, spec, batch["tokens"]))
    labels, mask = np.asarray(batch["labels"]), np.asarray(batch["mask"])
    correct = int(((logits.argmax(-1) == labels) & mask).sum())
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    valid = labels >= 0
    nll = -np.take_along_axis(logp, np.maximum(labels, 0)[..., None], -1)[
        ..., 0
    ]
    loss = (nll * valid).sum() / valid.sum()
    # The data-parallel path (here on this process's device mesh; on 2 devices:
    # CommandLineTest.test_data_parallel_run_matches_one_device_run).
    dp_step = held_out.data_parallel_eval_step(spec, step_lib.batch_mesh())
    for metrics in [
        held_out.eval_step(params, batch, spec=spec, microbatches=n)
        for n in (1, 4)
    ] + [dp_step(params, batch)]:
      self.assertEqual(int(metrics["correct"]), correct)
      self.assertEqual(int(metrics["count"]), int(mask.sum()))
      np.testing.assert_allclose(float(metrics["loss"]), loss, rtol=1e-5)

  def test_default_microbatches_by_state_size(self):
    # A string counts T x width + H x T^2 elements (its attention scores); a
    # part holds about 2^17 of them (sparse, trained) or 5 m^2 (random UT).
    spec = lambda kind, **kw: models.ModelSpec(kind, "res_ln", 6, 32, 4, **kw)
    sparse_k4 = spec("sparse", num_layers=5, width=32)  # m = 4000.
    self.assertEqual(sparse_k4.model_width, 4000)
    # 32 x (32 x 4000 + 2 x 32^2) / 2^17 = 31.75: the largest divisor is 16.
    self.assertEqual(implementation.microbatches(32, 32, sparse_k4), 16)
    # 256 x (64 x 256 + 2 x 64^2) / (5 x 256^2) = 19.2.
    self.assertEqual(implementation.microbatches(256, 64, spec("random")), 16)
    self.assertEqual(
        implementation.microbatches(32, 32, spec("trained", width=64)), 1
    )
    self.assertEqual(implementation.microbatches(32, 32, spec("random")), 1)
    # An MLP's hidden width counts: 64 x (64 x 512 + 2 x 64^2) / (5 x 256^2)
    # = 8, against 4 without the MLP.
    mlp = models.ModelSpec("random", "res_ln_mlp", 6, 64, 4, mlp_ratio=1)
    self.assertEqual(implementation.microbatches(64, 64, mlp), 8)
    self.assertEqual(implementation.microbatches(64, 64, spec("random")), 4)
    # The attention scores count: 128 x (61 x 64 + 2 x 61^2) / 2^17 = 11.1
    # (3.8 without them).
    trained = models.ModelSpec("trained", "attn", 4, 61, 2, width=64)
    self.assertEqual(implementation.microbatches(128, 61, trained), 8)
    # The random UT's budget grows with m^2: 128 x (61 x 512 + 2 x 61^2) /
    # (5 x 512^2) = 3.8.
    wide = models.ModelSpec("random", "res_ln", 4, 61, 2, m=512)
    self.assertEqual(implementation.microbatches(128, 61, wide), 2)
    # Attention-only, it has the coefficient form (no m-wide state; its
    # widest state 2 x (61 + 4) = 130 <= m): the batch whole. With the
    # reference implementation, or at m = 64 < 130, the rule above.
    attn = dataclasses.replace(wide, variant="attn")
    self.assertEqual(implementation.microbatches(128, 61, attn), 1)
    self.assertEqual(
        implementation.microbatches(
            128, 61, dataclasses.replace(attn, impl="reference")
        ),
        2,
    )
    narrow_attn = dataclasses.replace(attn, m=64)
    # 128 x (61 x 64 + 2 x 61^2) / (5 x 64^2) = 72.9: 64 parts.
    self.assertEqual(implementation.microbatches(128, 61, narrow_attn), 64)
    # A narrow random UT whose attention dominates runs one string a part
    # (Zhong & Andreas's size: m = 16, 4 heads, T = 61).
    narrow = models.ModelSpec(
        "random", "res_ln_mlp", 4, 61, 2, num_heads=4, m=16, mlp_ratio=4
    )
    self.assertEqual(implementation.microbatches(1000, 61, narrow), 1000)
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      with self.assertRaisesRegex(ValueError, "width m"):
        host.microbatches(8, 8, kind="random", width=16, num_heads=2)
    # Always a divisor of the batch, and never more microbatches than strings.
    self.assertEqual(implementation.microbatches(30, 32, sparse_k4), 15)
    self.assertEqual(implementation.microbatches(2, 128, sparse_k4), 2)

  def test_whole_batch_off_cpu(self):
    sparse_k4 = models.ModelSpec(
        "sparse", "res_ln", 6, 32, 4, num_layers=5, width=32
    )
    with mock.patch.object(jax, "default_backend", return_value="cpu"):
      self.assertEqual(implementation.microbatches(32, 32, sparse_k4), 16)
    with mock.patch.object(jax, "default_backend", return_value="gpu"):
      self.assertEqual(implementation.microbatches(32, 32, sparse_k4), 1)

  @parameterized.named_parameters(("auto", "auto", None), ("two", "2", 2))
  def test_cpu_microbatches_reach_the_step(self, value, parts):
    config = smoke_config(arg="model=random")  # Batch 8: 1 part by default.
    self.assertIsNone(
        implementation.configured_microbatches(config)
    )  # No cpu section.
    cpu_config.overlay(config).cpu.microbatches = value
    self.assertEqual(implementation.configured_microbatches(config), parts)
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    state, tx, _ = checkpoint.init_state(config, spec)
    step = step_lib.make_step(config, spec, tx)[0]
    with mock.patch.object(
        step_lib, "grad_sums", wraps=step_lib.grad_sums
    ) as sums:
      step(state, data_lib.train_batch(config, task, 0))
    self.assertEqual(
        [c.kwargs["microbatches"] for c in sums.call_args_list],
        [] if parts is None else [parts],
    )

  def test_step_reads_split_layers_as_the_plain_step_reads_stacked(self):
    """`make_step` passes an attention-only random UT in its coefficient
    form the frozen layers split (`implementation.split_frozen`): the same states as
    the plain jitted `train_step`, split once for the states it returns, and
    anew for another state."""
    config = smoke_config(
        task="khop", arg="model=random,variant=attn,k=2", batch_size=8
    )
    config.model.m = 64
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    t = data_lib.train_batch(config, task, 0)["tokens"].shape[1]
    self.assertTrue(implementation.splits_layers(spec, t))  # impl auto on CPU.
    state, tx, _ = checkpoint.init_state(config, spec)
    plain = jax.jit(functools.partial(step_lib.train_step, spec=spec, tx=tx))
    step = step_lib.make_step(config, spec, tx)[0]
    want = state
    got = jax.tree.map(jnp.array, state)  # Its own buffers: it is donated.
    with mock.patch.object(
        implementation, "split_frozen", wraps=implementation.split_frozen
    ) as split:
      for i in range(3):
        batch = data_lib.train_batch(config, task, i)
        want, want_metrics = plain(want, batch)
        got, metrics = step(got, batch)
        chex.assert_trees_all_close(metrics, want_metrics, rtol=1e-5)
      self.assertEqual(split.call_count, 1)
      chex.assert_trees_all_close(got.params, want.params, rtol=1e-5, atol=1e-6)
      other, _, _ = checkpoint.init_state(config, spec)
      step(other, data_lib.train_batch(config, task, 0))
      self.assertEqual(split.call_count, 2)

  @parameterized.named_parameters(
      ("zero", "0", r"config.cpu.microbatches='0'; use auto or a positive"),
      ("word", "all", r"config.cpu.microbatches='all'; use auto"),
      ("negative", "-2", r"config.cpu.microbatches='-2'; use auto"),
      (
          "not_a_divisor",
          "3",
          r"config.cpu.microbatches=3 must divide the 8 strings of each step's "
          r"batch on a device \(config.train.batch_size=8\)",
      ),
  )
  def test_bad_cpu_microbatches_is_one_line_error(self, value, pattern):
    config = cpu_config.overlay(smoke_config())
    config.cpu.microbatches = value
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    cli_helpers.assert_user_error(
        self, pattern, train.train_and_evaluate, config, workdir
    )
    self.assertFalse(os.path.exists(workdir))

  def test_stored_config_drops_host_settings(self):
    config = json.loads(
        cpu_config.overlay(smoke_config()).to_json_best_effort()
    )
    want = json.loads(smoke_config().to_json_best_effort())
    self.assertIn("cpu", config)
    self.assertEqual(records.stored_config(config), want)

  def test_run_resumes_on_other_host_settings_but_not_another_config(self):
    workdir = self.create_tempdir().full_path
    first = train.train_and_evaluate(smoke_config(steps=2), workdir)
    # Resumed as launch.train runs it on CPU: nothing left but the evaluation.
    again = train.train_and_evaluate(
        cpu_config.overlay(smoke_config(steps=2)), workdir
    )
    for key in FINAL_KEYS:
      self.assertEqual(again[key], first[key], key)
    # A field of the run still has to match.
    cli_helpers.assert_user_error(
        self,
        r"differs in train.lr\)",
        train.train_and_evaluate,
        smoke_config(steps=2, lr=0.5),
        workdir,
    )

  def test_sparse_run_saved_before_the_block_order_is_refused(self):
    workdir = self.create_tempdir().full_path
    config = smoke_config(steps=2)
    self.assertEqual(config.model.kind, "sparse")
    train.train_and_evaluate(config, workdir)
    path = os.path.join(workdir, "config.json")
    old = read_json(path)
    del old["model"]["impl"]  # As sparse runs recorded it before the redesign.
    with open(path, "w") as f:
      json.dump(old, f)
    for fn, args in (
        (train.train_and_evaluate, (config, workdir)),
        (records.load_config, (workdir,)),
    ):
      cli_helpers.assert_user_error(
          self, r"block order used before the redesign", fn, *args
      )

  def test_sparse_run_from_a_config_without_impl_resumes(self):
    config = smoke_config(steps=2)
    del config.model["impl"]  # A config built by hand, not by configs/common.
    workdir = self.create_tempdir().full_path
    first = train.train_and_evaluate(config, workdir)
    self.assertEqual(
        read_json(os.path.join(workdir, "config.json"))["model"]["impl"], "auto"
    )
    again = train.train_and_evaluate(config, workdir)
    self.assertEqual(again["param_checksum"], first["param_checksum"])
    self.assertEqual(records.load_config(workdir).model.impl, "auto")

  def test_two_runs_are_identical(self):
    config = smoke_config()
    dirs = [self.create_tempdir().full_path for _ in range(2)]
    finals = [train.train_and_evaluate(config, d) for d in dirs]
    for key in FINAL_KEYS:
      self.assertEqual(finals[0][key], finals[1][key], key)
    self.assertEqual(
        *[
            read_csv(os.path.join(d, "train_metrics.csv"), TRAIN_COLUMNS)
            for d in dirs
        ]
    )
    self.assertEqual(
        *[read_csv(os.path.join(d, "eval_metrics.csv")) for d in dirs]
    )
    params = [leaves_by_name(checkpoint.restore_params(d)[0]) for d in dirs]
    for name in params[0]:
      np.testing.assert_array_equal(params[0][name], params[1][name], name)

  def test_workdir_keeps_its_config(self):
    workdir = self.create_tempdir().full_path
    # An invalid config fails before it claims the workdir...
    bad = smoke_config(arg="variant=nope", steps=2)
    with self.assertRaisesRegex(UserError, "unknown variant 'nope'"):
      train.train_and_evaluate(bad, workdir)
    self.assertFalse(os.path.exists(os.path.join(workdir, "config.json")))
    # ...so that the corrected command can still use it.
    config = smoke_config(steps=2)
    train.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "metrics.json")) as f:
      metrics_text = f.read()
    other = smoke_config(arg="model=random", steps=2, lr=1e-3)
    with self.assertRaises(UserError) as cm:
      train.train_and_evaluate(other, workdir)
    differing = re.search(r"differs in ([^)]*)\)", str(cm.exception))
    self.assertIsNotNone(differing, str(cm.exception))
    fields = set(differing.group(1).split(", "))  # Dotted: the exact fields.
    self.assertEqual({f.split(".")[0] for f in fields}, {"model", "train"})
    self.assertContainsSubset({"model.kind", "train.lr"}, fields)
    self.assertIn("--workdir", str(cm.exception))
    # Nothing in the workdir was touched.
    self.assertEqual(
        read_json(os.path.join(workdir, "config.json")),
        json.loads(config.to_json_best_effort()),
    )
    with open(os.path.join(workdir, "metrics.json")) as f:
      self.assertEqual(f.read(), metrics_text)

  def test_nan_loss_stops_with_the_step(self):
    """NaN logits from step 5 on (a patched model): TrainingDiverged at step 5."""
    poison_from = 4  # 0-based index of the first bad batch: reported as step 5.
    real_batch, real_apply = data_lib.train_batch, models.apply

    def batch_with_marker(config, task, step):
      batch = real_batch(config, task, step)
      if step >= poison_from:
        batch = dict(batch, tokens=batch["tokens"].copy())
        batch["tokens"][:, 0] = -1  # Marker read by nan_apply below.
      return batch

    def nan_apply(params, spec, tokens_BxT, precision=None, last_only=False):
      logits = real_apply(
          params, spec, jnp.maximum(tokens_BxT, 0), precision, last_only
      )
      return jnp.where(jnp.any(tokens_BxT < 0), jnp.nan, logits)

    # The trained kind: a spec no other in-process test compiles.
    config = smoke_config(arg="model=trained", steps=8)
    workdir = self.create_tempdir().full_path
    threads = {t.ident for t in threading.enumerate()}
    with (
        mock.patch.object(data_lib, "train_batch", batch_with_marker),
        mock.patch.object(models, "apply", nan_apply),
    ):
      with self.assertRaises(loop.TrainingDiverged) as cm:
        train.train_and_evaluate(config, workdir)
    # Nothing of the run goes on (the TensorBoard writer is closed too). A
    # closed multiprocessing queue's feeder thread (tensorboardX's) exits on
    # its own, just after close(): wait for that; a writer left open would
    # keep its thread alive past the wait.
    new = [t for t in threading.enumerate() if t.ident not in threads]
    for t in new:
      t.join(timeout=10)
    self.assertEqual([t.name for t in new if t.is_alive()], [])
    self.assertIsInstance(cm.exception, UserError)
    self.assertRegex(
        str(cm.exception),
        r"loss became nan at step 5 \(last finite loss " r"[0-9.]+,",
    )
    self.assertRegex(str(cm.exception), r"--config\.train\.lr")
    self.assertFalse(os.path.exists(os.path.join(workdir, "metrics.json")))
    # The checkpoint saved just before (step 4) is complete and finite.
    params, _, _, _, step = checkpoint.restore_params(workdir)
    self.assertEqual(step, poison_from)
    chex.assert_tree_all_finite(params)

  def test_evaluate_compiles_once(self):
    config = smoke_config(arg="model=random")
    config.model.num_layers = 1  # A spec no other test compiles.
    task = data_lib.make_task(config)
    spec = models.model_spec(config, task.info)
    params = models.init(jax.random.PRNGKey(0), spec)
    valid = held_out.eval_batches(config, task)
    self.assertEqual(len({len(b["tokens"]) for b in valid}), 1)
    traces = []
    real = step_lib.loss_and_metrics

    def counting(*args):
      traces.append(1)
      return real(*args)

    with mock.patch.object(step_lib, "loss_and_metrics", counting):
      first = held_out.held_out_metrics(params, spec, valid)
      second = held_out.held_out_metrics(params, spec, valid)
    self.assertEqual(first, second)
    self.assertLen(traces, 1)  # One trace for all batches of both calls.


@pytest.mark.slow  # Each test runs launch.train as a command.
class CommandLineTest(parameterized.TestCase):

  def assert_one_line_error(self, proc, pattern):
    line = cli_helpers.assert_one_line_error(self, proc, pattern)
    return line

  def test_kill_and_resume_matches_uninterrupted_run(self):
    overrides = (
        "--config.train.steps=60",
        "--config.train.checkpoint_every=10",
        "--config.eval.test_each=True",  # The test curve resumes too.
    )
    steps = 60
    whole = self.create_tempdir("whole").full_path
    killed = self.create_tempdir("killed").full_path

    proc = run_train(whole, *overrides)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])

    log_path = os.path.join(killed, "first_attempt.log")
    with open(log_path, "w") as log:
      child = subprocess.Popen(
          train_command(killed, *overrides),
          cwd=ROOT,
          stdout=log,
          stderr=subprocess.STDOUT,
      )
    ckpt_dir = os.path.join(killed, "checkpoints")
    done_steps = []
    deadline = time.time() + 240
    try:
      while child.poll() is None and time.time() < deadline:
        if os.path.isdir(ckpt_dir):  # Finished step dirs only (not *.tmp-*).
          done_steps = [int(n) for n in os.listdir(ckpt_dir) if n.isdigit()]
          if done_steps:
            child.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    finally:
      if child.poll() is None and not done_steps:
        child.kill()
      child.wait()
    self.assertTrue(done_steps, "no checkpoint appeared before the run ended")
    self.assertEqual(child.returncode, -signal.SIGKILL)
    # Killed mid-run: a checkpoint short of the end, and no final metrics.
    self.assertLess(min(done_steps), steps)
    self.assertEqual(min(done_steps) % 10, 0)
    self.assertFalse(os.path.exists(os.path.join(killed, "metrics.json")))

    proc = run_train(killed, *overrides)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    resumed = re.search(r"resumed from checkpoint at step (\d+)", proc.stderr)
    self.assertIsNotNone(resumed, proc.stderr[-3000:])
    self.assertBetween(int(resumed.group(1)), 10, steps - 1)

    want = read_json(os.path.join(whole, "metrics.json"))
    got = read_json(os.path.join(killed, "metrics.json"))
    for key in FINAL_KEYS + ("curve", "test_curve", "test_at_best_valid"):
      self.assertEqual(got[key], want[key], key)
    self.assertEqual(
        [s for s, _ in got["test_curve"]], [s for s, _ in got["curve"]]
    )
    self.assertEqual(
        read_csv(os.path.join(killed, "train_metrics.csv"), TRAIN_COLUMNS),
        read_csv(os.path.join(whole, "train_metrics.csv"), TRAIN_COLUMNS),
    )
    self.assertEqual(
        read_csv(os.path.join(killed, "eval_metrics.csv")),
        read_csv(os.path.join(whole, "eval_metrics.csv")),
    )

  def test_divergence_is_one_line_error(self):
    workdir = self.create_tempdir().full_path
    proc = run_train(
        workdir, "--config.train.lr=1e30", "--config.train.grad_clip=1e30"
    )
    line = self.assert_one_line_error(
        proc,
        r"^error: loss became (nan|inf|-inf) at step \d+ .*--config\.train\.lr",
    )
    step = int(re.search(r"at step (\d+)", line).group(1))
    self.assertBetween(step, 1, 4)  # The smoke run has 4 steps.
    self.assertEqual(proc.returncode, 2)
    self.assertFalse(os.path.exists(os.path.join(workdir, "metrics.json")))

  def test_data_parallel_run_matches_one_device_run(self):
    # 2 CPU devices, each with half of every batch, against the same run on
    # one device: equal up to the order of float additions. (The random UT's
    # data-parallel step: bench_test.DpBenchTest.)
    config = "configs/dyck.py:smoke,model=sparse,variant=res_ln"
    overrides = ("--config.train.steps=12",)
    one = self.create_tempdir("one").full_path
    two = self.create_tempdir("two").full_path
    proc = run_train(one, *overrides, config=config)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    cores = len(os.sched_getaffinity(0))
    if cores > 1:  # One device on several cores: the log says how to use them.
      self.assertIn(f"--cpu_devices={cores}` splits each batch", proc.stderr)
    proc = run_train(
        two,
        *overrides,
        "--cpu_devices=2",  # Data parallel.
        "--config.cpu.ynn_fusions=False",
        config=config,
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    want = read_json(os.path.join(one, "metrics.json"))
    got = read_json(os.path.join(two, "metrics.json"))
    self.assertEqual(got["step"], 12)
    self.assertTrue(
        read_json(os.path.join(two, "config.json"))["train"]["data_parallel"]
    )
    for key in (
        "eval_accuracy",
        "eval_loss",
        "final_train_loss",
        "param_checksum",
    ):
      self.assertAlmostEqual(
          got[key], want[key], delta=1e-4 * abs(want[key]), msg=key
      )
    self.assertIn("each batch split over 2 cpu devices", proc.stderr)
    self.assertNotIn("splits each batch", proc.stderr)

  def test_data_parallel_batch_must_split_evenly(self):
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    proc = run_train(workdir, "--cpu_devices=3")
    self.assert_one_line_error(
        proc, r"config.train.batch_size=8 must be a multiple of the 3 devices"
    )
    self.assertFalse(os.path.exists(workdir))

  def test_bad_cpu_devices_is_one_line_error(self):
    proc = run_train(self.create_tempdir().full_path, "--cpu_devices=0")
    self.assert_one_line_error(proc, r"--cpu_devices=0 must be at least 1")

  @parameterized.named_parameters(
      (
          "log_every",
          "--config.train.log_every=0",
          r"config.train.log_every=0; use an integer >= 1",
      ),
      (
          "eval_every",
          "--config.eval.every=-5",
          r"config.eval.every=-5; use an integer >= 1",
      ),
      (
          "checkpoint_every",
          "--config.train.checkpoint_every=0",
          r"config.train.checkpoint_every=0; use an integer >= 1",
      ),
      (
          "steps",
          "--config.train.steps=0",
          r"config.train.steps=0; use an integer >= 1",
      ),
      (
          "ut_seed",
          "--config.model.ut_seed=-1",
          r"model.ut_seed=-1 must be a non-negative integer",
      ),
      (
          "lr",
          "--config.train.lr=-0.01",
          r"config.train.lr=-0.01; use a positive",
      ),
      (
          "lr_text",
          "--config.train.lr=fast",
          r"flag --config.train.lr=fast: could not convert string to float",
      ),
      (
          "init_params_missing",
          "--config.train.init_params=/nonexistent/e.npz",
          r"config.train.init_params='/nonexistent/e.npz' is not a file",
      ),
      (
          "misspelt_field",
          "--config.train.step=10",
          r"no such config field: 'step'; Did you mean \"steps\"",
      ),
      (
          "positional",
          "model=sparse",
          r"unexpected argument\(s\) model=sparse; ",
      ),
  )
  def test_bad_config_value_is_one_line_error(self, override, pattern):
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    proc = run_train(workdir, override)
    self.assert_one_line_error(proc, pattern)
    self.assertFalse(os.path.exists(workdir))

  def test_workdir_that_cannot_be_a_folder_is_one_line_error(self):
    path = os.path.join(self.create_tempdir().full_path, "afile")
    with open(path, "w") as f:
      f.write("keep me")
    for workdir, pattern in (
        (path, r"--workdir=.*afile is a file; use a folder"),
        (path + "/run", r"afile is a file, not a folder"),
        ("", r"--workdir is empty"),
    ):
      self.assert_one_line_error(run_train(workdir), pattern)
    with open(path) as f:
      self.assertEqual(f.read(), "keep me")

  @parameterized.named_parameters(
      (
          "unknown_model",
          "configs/dyck.py:model=bogus",
          r"unknown model kind 'bogus'",
      ),
      (
          "unknown_argument",
          "configs/dyck.py:foo=1",
          r"unknown config argument 'foo'",
      ),
      (
          "unknown_variant",
          "configs/dyck.py:smoke,variant=nope",
          r"unknown variant 'nope'",
      ),
      (
          "negative_embed_scale",
          "configs/khop.py:smoke,embed_scale=-1",
          r"model.embed_scale=-1.0 must be a positive number",
      ),
  )
  def test_bad_config_argument_is_one_line_error(self, config, pattern):
    workdir = os.path.join(self.create_tempdir().full_path, "run")
    proc = run_train(workdir, config=config)
    self.assert_one_line_error(proc, pattern)
    self.assertFalse(os.path.exists(os.path.join(workdir, "config.json")))


if __name__ == "__main__":
  absltest.main()
