"""Sweeps: 8 emulated devices give the same metrics as runs done one by one.

Tests that run `launch.sweep` as a subprocess are marked slow; the in-process
ones check a vmapped group against single runs, and the worker heuristics of
`ut.cpu.workers`.
"""

import collections
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import types
from unittest import mock

from absl.testing import absltest
import jax
import ml_collections
import numpy as np
import pytest

from configs import khop
from tests import cli_helpers
from tests import sweep_config
from ut.cpu import workers
from ut.errors import UserError
from ut.experiments import sweep
from ut.experiments.sweep import rules
from ut.experiments.sweep import runs as sweep_runs
from ut.io import reports
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import held_out
from ut.training import implementation
from ut.training import loop
from ut.training import models
from ut.training import step as step_lib
from ut.training import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tests", "sweep_config.py")


def run_sweep_cli(workdir, devices, arg=None, *flags):
  env = dict(
      os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}"
  )
  config = CONFIG + (f":{arg}" if arg else "")
  return subprocess.run(
      [
          sys.executable,
          "-m",
          "launch.sweep",
          f"--config={config}",
          f"--workdir={workdir}",
          *flags,
      ],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
  )


def steps_evaluated(config):
  """How many times a run of `config` is evaluated: every eval.every steps and
  after the last."""
  steps, every = config.train.steps, config.eval.every
  return steps // every + (steps % every != 0)


def _read(path):
  with open(path) as f:
    return f.read()


def _alive(pid):
  """Whether process `pid` exists and is not a zombie."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


class SweepTest(absltest.TestCase):

  @pytest.mark.slow
  def test_eight_devices_match_one_by_one(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, devices=8)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("8 device(s)", proc.stderr)
    self.assertIn("vmapped groups", proc.stderr)
    runs = sweep.collect_runs(sweep_config)
    self.assertLen(runs, 8)
    self.assertLen(
        {sweep.group_key(c) for _, c in runs}, 1
    )  # One vmapped group.
    for name, config in runs:
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got = json.load(f)
      want = train.train_and_evaluate(config, os.path.join(tmp, "single", name))
      self.assertEqual(got["eval_accuracy"], want["eval_accuracy"], name)
      for key in ("eval_loss", "final_train_loss", "param_checksum"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=name)
    # Learning rates really differ between runs of the group.
    losses = {
        n: json.load(open(os.path.join(tmp, "runs", n, "metrics.json")))[
            "final_train_loss"
        ]
        for n, _ in runs
    }
    self.assertGreater(len(set(losses.values())), 4)
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertLen(table["rows"], 2)  # Two learning rates, 4 seeds each.
    for row in table["rows"]:
      self.assertEqual(row["seeds"], 4)
      accs = [
          json.load(open(os.path.join(tmp, "runs", n, "metrics.json")))[
              "eval_accuracy"
          ]
          for n in row["runs"].split(";")
      ]
      self.assertAlmostEqual(row["accuracy_mean"], np.mean(accs))
      self.assertAlmostEqual(row["accuracy_std"], np.std(accs, ddof=1))

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
    train_test)."""
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

  @pytest.mark.slow
  def test_test_each_flag_reaches_every_run_and_the_table(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "sparse", "--test_each")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    names = [n for n, _ in sweep.collect_runs(sweep_config, "sparse")]
    for name in names:
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got = json.load(f)
      self.assertTrue(got["config"]["eval"]["test_each"], name)
      self.assertEqual(
          [s for s, _ in got["test_curve"]], [s for s, _ in got["curve"]]
      )
    with open(os.path.join(tmp, "table.md")) as f:
      self.assertIn("test at best valid", f.readline())
    # Without the flag the recorded runs are another config: refused, kept.
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    self.assertNotEqual(proc.returncode, 0)
    self.assertRegex(proc.stderr, r"differs in eval\.test_each")
    self.assertTrue(
        os.path.exists(os.path.join(tmp, "runs", names[0], "metrics.json"))
    )

  @pytest.mark.slow
  def test_restart_skips_finished_runs(self):
    # The sparse kind with res_ln_mlp, vmapped on a 1-device mesh.
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "sparse", "--batching=vmap")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    runs = sweep.collect_runs(sweep_config, "sparse")
    name = runs[1][0]
    path = os.path.join(tmp, "runs", name, "metrics.json")
    others = {
        n: os.path.getmtime(os.path.join(tmp, "runs", n, "metrics.json"))
        for n, _ in runs
        if n != name
    }
    os.remove(path)
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertFalse(os.path.exists(path))  # Nothing trained.
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual(table["missing_runs"], [name])
    self.assertEqual([r["seeds"] for r in table["rows"]], [2])
    proc = run_sweep_cli(tmp, 1, "sparse", "--batching=vmap")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("1 to do", proc.stderr)
    self.assertTrue(os.path.exists(path))
    # The group had a checkpoint folder, gone once its run was recorded.
    self.assertEqual(os.listdir(os.path.join(tmp, "groups")), [])
    for n, mtime in others.items():
      self.assertEqual(
          os.path.getmtime(os.path.join(tmp, "runs", n, "metrics.json")), mtime
      )

  def test_table_counts_each_rows_training_time(self):
    workdir = self.create_tempdir().full_path
    runs = sweep.collect_runs(sweep_config, "sparse")[:2]
    logged, grouped = (n for n, _ in runs)
    for (name, config), seconds in zip(runs, (None, 90.0)):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              name=name,
              eval_accuracy=0.5,
              task="dyck",
              kind="sparse",
              variant="res_ln_mlp",
              run_seconds=seconds,
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    # A single run logs its step rate: 100 steps at 10/s, 200 at 4/s: 60 s.
    with open(
        os.path.join(workdir, "runs", logged, "train_metrics.csv"), "w"
    ) as f:
      f.write("step,loss,steps_per_sec\n100,1.0,10\n300,0.5,4\n")
    [row] = sweep.aggregate(workdir, [logged, grouped])
    # The vmapped group's run has no log: its share of the group, 90 s.
    self.assertAlmostEqual(row["core_minutes"], (60 + 90) / 60)
    self.assertEqual(row["trained_runs"], 2)
    compiled = dict(row, seeds=3, trained_runs=0, core_minutes=0.0)
    self.assertEqual(row["accelerator_runs"], 0)
    self.assertEqual(
        sweep.cost_note([dict(row, core_minutes=90.0), compiled], 150.4)[:65],
        "Training: 1.5 core-hours over 2 runs trained on the CPU (each run",
    )
    self.assertIn(
        "matmul when this table was written: 150 GFLOP/s",
        sweep.cost_note([row], 150.4),
    )
    self.assertNotIn("wall time", sweep.cost_note([row], 150.4))
    # A run trained on an accelerator counts apart, in wall minutes.
    path = os.path.join(workdir, "runs", grouped, "metrics.json")
    with open(path) as f:
      metrics = json.load(f)
    reports.write_json(
        path, dict(metrics, provenance=dict(device="NVIDIA H200"))
    )
    [row] = sweep.aggregate(workdir, [logged, grouped])
    self.assertAlmostEqual(row["core_minutes"], 1.0)
    self.assertAlmostEqual(row["accelerator_minutes"], 1.5)
    self.assertEqual(
        (row["accelerator_runs"], row["accelerators"]), (1, "NVIDIA H200")
    )
    note = sweep.cost_note([row], 150.4)
    self.assertIn("0.0 core-hours over 1 runs trained on the CPU", note)
    self.assertIn("1 run trained on NVIDIA H200: 2 minutes of training", note)
    self.assertNotIn("resumed", note)
    note = sweep.cost_note([dict(row, resumed_runs=2)], 150.4)
    self.assertIn("2 runs of resumed vmapped groups count only their", note)

  def test_table_shows_test_at_best_valid_where_every_run_has_it(self):
    workdir = self.create_tempdir().full_path
    runs = sweep.collect_runs(sweep_config, "sparse")[:2]
    best = (0.5, 0.75)
    for (name, config), b in zip(runs, best):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              name=name,
              eval_accuracy=0.25,
              test_accuracy=0.25,
              test_at_best_valid=dict(
                  step=4, valid_accuracy=0.9, test_accuracy=b
              ),
              task="dyck",
              kind="sparse",
              variant="res_ln_mlp",
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    names = [n for n, _ in runs]
    [row] = sweep.aggregate(workdir, names)
    self.assertAlmostEqual(row["test_best_mean"], np.mean(best))
    self.assertAlmostEqual(row["test_best_std"], np.std(best, ddof=1))
    table = sweep.markdown_table([row, dict(row, test_best_mean=0.0)])
    self.assertIn("test at best valid", table.splitlines()[0])
    self.assertIn(reports.mean_std(np.mean(best), np.std(best, ddof=1)), table)
    # One run without it: the cell has no such score, and the table no column.
    path = os.path.join(workdir, "runs", names[1], "metrics.json")
    with open(path) as f:
      metrics = json.load(f)
    del metrics["test_at_best_valid"]
    reports.write_json(path, metrics)
    [row] = sweep.aggregate(workdir, names)
    self.assertNotIn("test_best_mean", row)
    self.assertNotIn("test at best valid", sweep.markdown_table([row]))

  @pytest.mark.slow
  def test_runs_recorded_with_another_config(self):
    """An older record lacking a field added since counts as done; one whose
    config differs stops the sweep with a one-line error naming the field."""
    tmp = self.create_tempdir().full_path
    runs = sweep.collect_runs(sweep_config, "sparse")
    for i, (name, config) in enumerate(runs):
      recorded = json.loads(config.to_json_best_effort())
      # As recorded before these fields existed.
      del recorded["model"]["mlp_width"], recorded["model"]["embed_scale"]
      if i == 2:
        recorded["train"]["steps"] = 999
      os.makedirs(os.path.join(tmp, "runs", name))
      with open(os.path.join(tmp, "runs", name, "metrics.json"), "w") as f:
        json.dump(
            dict(
                config=recorded,
                name=name,
                eval_accuracy=0.5,
                task="dyck",
                kind="sparse",
                variant="res_ln_mlp",
            ),
            f,
        )
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    cli_helpers.assert_one_line_error(
        self,
        proc,
        rf"runs/{re.escape(runs[2][0])} was recorded with another "
        r"config \(differs in train.steps\)",
    )
    os.remove(os.path.join(tmp, "runs", runs[2][0], "metrics.json"))
    proc = run_sweep_cli(tmp, 1, "sparse", "--aggregate_only")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual([r["seeds"] for r in table["rows"]], [2])  # One cell.
    self.assertEqual(table["missing_runs"], [runs[2][0]])

  @pytest.mark.slow
  def test_workers_share_the_runs(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "kinds", "--workers=2")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    trained = [
        int(n)
        for n in re.findall(
            r"worker \d of 2: trained (\d) of 6 work units", proc.stderr
        )
    ]
    self.assertLen(trained, 2)
    self.assertEqual(sum(trained), 6)  # One run per unit on one CPU device.
    claimed = re.findall(r"claimed (\S+) \(1 runs\)", proc.stderr)
    self.assertLen(claimed, 6)
    self.assertLen(set(claimed), 6)  # Each run trained once.
    self.assertFalse(os.path.exists(os.path.join(tmp, "claims")))
    self.assertNotIn("os.fork() was called", proc.stderr)  # Harmless here.
    self.assertNotEmpty(os.listdir(os.path.join(tmp, "jax_cache")))
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual(table["missing_runs"], [])
    self.assertEqual(
        sorted(r["kind"] for r in table["rows"]),
        ["random", "sparse", "trained"],
    )
    for name, config in sweep.collect_runs(sweep_config, "kinds"):
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got = json.load(f)
      want = train.train_and_evaluate(config, os.path.join(tmp, "single", name))
      np.testing.assert_allclose(
          got["eval_loss"], want["eval_loss"], rtol=1e-4, err_msg=name
      )

  @pytest.mark.slow
  def test_workers_stop_when_the_sweep_is_killed(self):
    tmp = self.create_tempdir().full_path
    log = os.path.join(tmp, "stderr.txt")
    with open(log, "w") as err:
      parent = subprocess.Popen(
          [
              sys.executable,
              "-m",
              "launch.sweep",
              f"--config={CONFIG}:long",
              f"--workdir={tmp}",
              "--workers=2",
          ],
          cwd=ROOT,
          stderr=err,
      )
    workers = []
    try:
      deadline = time.time() + 300
      while len(re.findall(r"step \d+/1000000", _read(log))) < 2:
        self.assertIsNone(parent.poll(), _read(log)[-3000:])
        self.assertLess(time.time(), deadline, "workers never started training")
        time.sleep(0.5)
      with open(f"/proc/{parent.pid}/task/{parent.pid}/children") as f:
        workers += [int(p) for p in f.read().split()]
      self.assertLen(workers, 2)
      parent.send_signal(signal.SIGKILL)  # No `finally` runs in the sweep.
      parent.wait()
      deadline = time.time() + 30
      while any(map(_alive, workers)) and time.time() < deadline:
        time.sleep(0.2)
      self.assertEqual([w for w in workers if _alive(w)], [])
    finally:
      parent.kill()
      for w in workers:
        if _alive(w):
          os.kill(w, signal.SIGKILL)

  def test_claim_is_given_once_per_set_of_workers(self):
    tmp = self.create_tempdir().full_path
    first, second = sweep.claims_folder(tmp), sweep.claims_folder(tmp)
    self.assertNotEqual(first, second)
    self.assertTrue(sweep.claim(first, "run_a"))
    self.assertFalse(sweep.claim(first, "run_a"))
    self.assertTrue(sweep.claim(first, "run_b"))
    self.assertTrue(sweep.claim(second, "run_a"))  # A later set starts afresh.

  def test_work_units_keep_compiled_runs_after_their_target(self):
    runs = sweep.collect_runs(
        sweep.load_config_module(
            os.path.join(ROOT, "configs", "dyck_table.py")
        ),
        "smoke,rows=all,kinds=trained+random,variants=attn,seeds=2,mixes=hard",
    )
    groups = {}
    for name, config in runs:
      groups.setdefault(sweep.group_key(config), []).append((name, config))
    groups = list(groups.values())
    self.assertIs(sweep.work_units(groups, vmapped=True), groups)
    units = sweep.work_units(groups, vmapped=False)
    self.assertCountEqual(
        [n for unit in units for n, _ in unit], [n for n, _ in runs]
    )
    self.assertLen(units, 4)  # 2 seeds x 2 kinds.
    for unit in units:
      (target, config), *compiled_runs = unit
      self.assertEqual(config.compiled, "")
      # The trained model's two compiled-UT runs follow it; random has none.
      self.assertLen(compiled_runs, 2 if config.model.kind == "trained" else 0)
      for name, c in compiled_runs:
        self.assertEqual(name.split("_compiled=")[0], target)

  def test_worker_cpus_split_the_cpus(self):
    cpus = {0, 1, 2, 3, 4}
    shares = [workers.worker_cpus(i, 2, cpus) for i in range(2)]
    self.assertEqual(shares, [{0, 1, 2}, {3, 4}])
    self.assertEqual(
        [workers.worker_cpus(i, 3, {0, 1}) for i in range(3)], [{0}, {1}, {0}]
    )  # More workers than CPUs: round robin.
    self.assertLessEqual(workers.worker_cpus(0, 1), os.sched_getaffinity(0))

  def test_cost_proxy_orders_by_size(self):
    configs = dict(sweep.collect_runs(sweep_config, "kinds"))
    cost = {
        name.split("_")[0]: sweep.run_cost(c) for name, c in configs.items()
    }
    self.assertGreater(cost["model=sparse"], cost["model=random"])
    self.assertGreater(cost["model=random"], cost["model=trained"])

  def test_adaptive_sweep_adds_runs_in_a_second_pass(self):
    tmp = self.create_tempdir().full_path
    # In process: keep JAX's cache setting off this temporary folder.
    with mock.patch.object(sweep_runs, "use_compilation_cache"):
      sweep.run_sweep(
          os.path.join(ROOT, "tests", "sweep_config.py:adaptive"), tmp
      )
    runs = os.path.join(tmp, "runs")
    with open(
        os.path.join(runs, "model=random_smoke_seed=0", "metrics.json")
    ) as f:
      first = json.load(f)
    lr = round(first["eval_accuracy"] / 100, 6)
    third = os.path.join(
        runs, f"model=random_smoke_seed=2_train.lr={lr}", "metrics.json"
    )
    self.assertTrue(os.path.exists(third), os.listdir(runs))
    with open(third) as f:
      self.assertEqual(json.load(f)["lr"], lr)
    with open(os.path.join(tmp, "table.json")) as f:
      table = json.load(f)
    self.assertEqual(sum(r["seeds"] for r in table["rows"]), 3)
    self.assertEqual(table["missing_runs"], [])

  def test_dyck_table_adds_seeds_where_seeds_disagree(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )

    def plan(accuracy_of):
      added = []
      add = lambda arg="", **kw: added.append(arg) or arg
      finished = lambda name: (
          None
          if accuracy_of(name) is None
          else {"eval_accuracy": accuracy_of(name)}
      )
      module.sweep(
          add,
          "smoke,mixes=za,compiled=false",
          adapt=rules.adapter(add, finished),
      )
      return added

    base = plan(lambda name: None)
    self.assertLen(base, 15)  # 5 rows x 3 seeds, none recorded yet.
    # The sparse row spreads by 2.5 points, every other row by 1.5.
    spread = lambda name: (
        0.9 + 0.025 * int(name.split("seed=")[1][0]) / 2
        if "model=sparse" in name
        else 0.9 + 0.015 * int(name.split("seed=")[1][0]) / 2
    )
    added = [run for run in plan(spread) if run not in base]
    self.assertEqual(
        added,
        [
            "model=sparse,variant=attn,mix=za,seed=3,smoke",
            "model=sparse,variant=attn,mix=za,seed=4,smoke",
        ],
    )
    # A diverged seed (NaN accuracy) counts as a disagreement.
    diverged = lambda name: (
        math.nan if "trained,variant=attn" in name and "seed=1" in name else 0.9
    )
    self.assertEqual(
        [r for r in plan(diverged) if r not in base],
        [f"model=trained,variant=attn,mix=za,seed={s},smoke" for s in (3, 4)],
    )
    # A row whose seeds are not all recorded gets no more seeds yet.
    partial = lambda name: None if "seed=2" in name else spread(name)
    self.assertEqual([r for r in plan(partial) if r not in base], [])

  def test_khop_table_trains_rising_cells_longer(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    cap = module.get_config("smoke").train.steps

    def recorded(curve_of):
      def finished(name):
        curve = curve_of(name)
        if curve is None:
          return None
        return dict(
            step=curve[-1][0],
            stopped_early=None if curve[-1][0] == cap else "accuracy",
            curve=curve,
            config=dict(train=dict(steps=cap)),
        )

      return finished

    def plan(curve_of):
      added = []
      add = lambda arg="", **kw: added.append((arg, kw)) or arg
      module.sweep(
          add,
          "smoke,ks=2,kinds=sparse+random,variants=attn,compiled=false",
          adapt=rules.adapter(add, recorded(curve_of)),
      )
      return added

    base = plan(lambda name: None)
    self.assertLen(base, 9)  # sparse, random m = 256 and m = 928; 3 seeds.
    # Evaluations at each fifth of the cap; the sparse row's seed 1 gains
    # 2 points over the last fifth, every other run 0.5.
    steps = [cap * i // 5 for i in range(1, 6)]
    curve = lambda gain: [[s, 0.5 + gain * (s == cap)] for s in steps]
    rising = lambda name: curve(
        0.02 if "model=sparse" in name and "seed=1" in name else 0.005
    )
    added = [run for run in plan(rising) if run not in base]
    self.assertEqual(
        added,
        [
            (
                f"model=sparse,variant=attn,k=2,seed={s},smoke",
                {"train.steps": 5 * cap},
            )
            for s in range(3)
        ],
    )
    # A run stopped early (here at 99.5%) is not at its cap: flat or not.
    early = lambda name: [
        [s, 0.5 + 0.02 * (s == steps[-2])] for s in steps[:-1]
    ]
    self.assertEqual([r for r in plan(early) if r not in base], [])
    # A cell with a seed not yet recorded waits.
    partial = lambda name: None if "seed=2" in name else rising(name)
    self.assertEqual([r for r in plan(partial) if r not in base], [])
    # Through the sweep: from recorded metrics, runs of their own (a new
    # name, the cap times `longer`); none with longer=1.
    workdir = self.create_tempdir().full_path
    grid = "smoke,ks=2,kinds=sparse,variants=attn,compiled=false,longer={}"
    for name, config in sweep.collect_runs(module, grid.format(3)):
      reports.write_json(
          os.path.join(workdir, "runs", name, "metrics.json"),
          dict(
              recorded(rising)(name),
              config=json.loads(config.to_json_best_effort()),
          ),
      )
    runs = sweep.collect_runs(module, grid.format(3), workdir)
    self.assertLen(runs, 6)
    self.assertLen({n for n, _ in runs}, 6)
    self.assertEqual(
        sorted(c.train.steps for _, c in runs), [cap] * 3 + [3 * cap] * 3
    )
    self.assertLen(sweep.collect_runs(module, grid.format(1), workdir), 3)

  def test_dyck_table_has_the_papers_rows(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )
    runs = sweep.collect_runs(module, "smoke,mixes=za")
    cells = collections.Counter(
        (c.model.kind, c.model.variant, c.model.m, c.compiled)
        for _, c in runs
        if c.model.kind != "sparse"
    )
    self.assertEqual(
        cells,
        {
            ("random", "attn", 256, ""): 3,
            ("random", "attn", 512, ""): 3,
            ("trained", "attn", 256, ""): 3,
            ("trained", "attn", 256, "sparse"): 3,
            ("trained", "attn", 256, "random"): 3,
            ("trained", "res_ln_mlp", 256, ""): 3,
        },
    )
    self.assertLen([c for _, c in runs if c.model.kind == "sparse"], 3)
    only = sweep.collect_runs(
        module, "smoke,mixes=za,kinds=random,compiled=false"
    )
    self.assertEqual(sorted({c.model.m for _, c in only}), [256, 512])
    with self.assertRaisesRegex(UserError, "rows='some'"):
      sweep.collect_runs(module, "rows=some")

  def test_dyck_table_takes_the_selected_learning_rates(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )
    with mock.patch.dict(module.LRS, clear=True):
      with self.assertRaisesRegex(
          UserError,
          r"LRS has no choice for kind=sparse, variant=attn: choose it with "
          r"`python -m launch.sweep --config=configs/dyck_select.py .*"
          r"dyck_select/selection.md",
      ):
        sweep.collect_runs(module, "mixes=hard,compiled=false")
    chosen = {
        ("sparse", "attn"): 3e-2,
        ("random", "attn"): 3e-3,
        ("trained", "attn"): 3e-4,
        ("trained", "res_ln_mlp"): 1e-3,
    }
    with mock.patch.dict(module.LRS, chosen, clear=True):
      runs = sweep.collect_runs(module, "mixes=hard,compiled=false")
    got = {
        (c.model.kind, c.model.variant, c.model.m): c.train.lr
        for _, c in runs
    }
    self.assertEqual(got[("sparse", "attn", 256)], 3e-2)
    self.assertEqual(got[("random", "attn", 256)], 3e-3)
    self.assertEqual(got[("random", "attn", 512)], 3e-3)
    self.assertEqual(got[("trained", "res_ln_mlp", 256)], 1e-3)

  def test_table_seeds_draw_new_machines(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "dyck_table.py")
    )
    runs = sweep.collect_runs(
        module,
        "smoke,rows=all,mixes=za,kinds=random,variants=res_ln_mlp,seeds=3",
    )
    self.assertEqual([c.model.ut_seed for _, c in runs], [0, 1, 2])
    # The frozen weights (the UT and its MLP) differ between seeds.
    task = data_lib.make_task(runs[0][1])
    params = [
        checkpoint.init_state(c, models.model_spec(c, task.info))[0].params
        for _, c in runs
    ]
    for frozen in (("layers", "wq"), ("mlp", "w1")):
      a, b = (np.asarray(p[frozen[0]][frozen[1]]) for p in params[:2])
      self.assertFalse(np.allclose(a, b), frozen)
    # An explicit ut_seed keeps the machine across program seeds.
    fixed = [
        module.get_config(f"model=random,seed={s},ut_seed=7,smoke")
        for s in (0, 1)
    ]
    self.assertEqual([c.model.ut_seed for c in fixed], [7, 7])

  def test_khop_table_takes_the_selected_hyperparameters(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    grid = "ks=2,kinds=sparse+trained,variants=res_ln+res_ln_mlp,seeds=1"
    with mock.patch.dict(module.UTS, clear=True):
      with self.assertRaisesRegex(
          UserError,
          r"UTS has no choice for kind=sparse, variant=res_ln, k=2: choose "
          r"it with `python -m launch.sweep --config=configs/khop_select.py"
          r":part=uts .*khop_select_uts/selection.md",
      ):
        sweep.collect_runs(module, grid)
    trained = {("res_ln_mlp", 2): (3e-3, 1.0, "cosine")}
    uts = {"sparse": (1e-2, 0.3, "constant"), "random": (3e-2, 0.1, "constant")}
    with mock.patch.dict(module.TRAINED, trained, clear=True):
      with mock.patch.dict(module.UTS, uts, clear=True):
        runs = sweep.collect_runs(module, grid)
        # An explicit embed_scale wins over the selection's.
        scaled = sweep.collect_runs(module, grid + ",embed_scale=0.5")
        with self.assertRaisesRegex(
            UserError, r"no choice for kind=trained, variant=res_ln_mlp, k=3"
        ):
          sweep.collect_runs(module, grid.replace("ks=2", "ks=3"))
    got = {
        (c.model.kind, c.model.variant): (
            c.train.lr,
            c.model.embed_scale,
            c.train.schedule,
        )
        for _, c in runs
    }
    self.assertEqual(
        got,
        {
            ("sparse", "res_ln"): (1e-2, 0.3, "constant"),
            ("trained", "res_ln_mlp"): (3e-3, 1.0, "cosine"),
        },
    )
    self.assertEqual({c.model.embed_scale for _, c in scaled}, {0.5})

  def test_khop_table_at_the_selected_batch_trains_the_differing_rows(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    trained = {
        (v, 2): (1e-3, 1.0, "constant") for v in ("attn", "res_ln_mlp")
    }
    batches = {
        ("attn", 2): (32, 100),  # The protocol.
        ("res_ln_mlp", 2): (16, 1000),
    }
    grid = "ks=2,kinds=trained+sparse,seeds=2,compiled=False,batch=selected"
    with mock.patch.dict(module.TRAINED, trained, clear=True):
      with mock.patch.dict(module.BATCHES, clear=True):
        with self.assertRaisesRegex(
            UserError,
            r"BATCHES has no choice for kind=trained, variant=attn, k=2: .*"
            r"khop_select_batch/selection.md",
        ):
          sweep.collect_runs(module, grid)
      with mock.patch.dict(module.BATCHES, batches, clear=True):
        runs = sweep.collect_runs(module, grid)
    # Only the trained row whose choice differs, at that choice; the cap and
    # the evaluation interval in strings as at batch 32.
    self.assertLen(runs, 2)
    for _, c in runs:
      self.assertEqual(
          (c.model.kind, c.model.variant), ("trained", "res_ln_mlp")
      )
      self.assertEqual((c.train.batch_size, c.train.warmup_steps), (16, 1000))
      self.assertEqual(c.train.steps * 16, 20000 * 32)
      self.assertEqual(c.eval.every * 16, 500 * 32)
    with self.assertRaisesRegex(UserError, r"batch='x'; use protocol or"):
      sweep.collect_runs(module, "batch=x")

  def test_khop_config_batch_and_warmup(self):
    config = khop.get_config("model=trained,batch=64,warmup=0")
    self.assertEqual(
        (config.train.batch_size, config.train.warmup_steps), (64, 0)
    )
    self.assertEqual((config.train.steps, config.eval.every), (10000, 250))
    with self.assertRaisesRegex(UserError, r"batch=0, warmup=100; use batch"):
      khop.get_config("batch=0")

  def test_khop_grid_compiles_into_sparse_at_every_k(self):
    module = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    compiled = lambda arg: sorted(
        (c.data.k, c.compiled)
        for _, c in sweep.collect_runs(module, arg)
        if c.compiled
    )
    grid = "smoke,kinds=trained,variants=attn,seeds=1"
    self.assertEqual(
        compiled(grid), [(2, "random"), (2, "sparse"), (3, "sparse")]
    )
    self.assertEqual(
        compiled(grid + ",ks=3+4,random_compiled_ks=3"),
        [(3, "random"), (3, "sparse"), (4, "sparse")],
    )
    self.assertEqual(compiled(grid + ",compiled=false"), [])
    # At k = 2 the random UT also runs at the sparse UT's width.
    widths = sorted(
        c.model.m
        for _, c in sweep.collect_runs(
            module, "smoke,kinds=random,variants=attn,seeds=1"
        )
        if c.data.k == 2
    )
    self.assertEqual(widths, [256, 928])

  def test_workers_split_memory_bound_and_other_runs(self):
    units = [[run] for run in sweep.collect_runs(sweep_config, "kinds")]
    kinds = lambda order: [u[0][1].model.kind for u in order]
    size = lambda order: [sweep.run_cost(u[0][1]) for u in order]
    order = lambda index, count: workers.worker_order(
        units,
        index,
        count,
        cost=lambda u: sweep.run_cost(u[0][1]),
        memory_bound=lambda u: workers.memory_bound(u[0][1].model.kind),
    )
    alone = order(0, 1)
    self.assertEqual(size(alone), sorted(size(units), reverse=True))
    even, odd = order(2, 4), order(1, 4)
    num_sparse = kinds(units).count("sparse")
    self.assertGreater(num_sparse, 0)
    self.assertLess(num_sparse, len(units))
    self.assertEqual(kinds(even)[:num_sparse], ["sparse"] * num_sparse)
    self.assertNotIn("sparse", kinds(odd)[: len(units) - num_sparse])
    for order, split in ((even, num_sparse), (odd, len(units) - num_sparse)):
      # Every unit once, largest first within each class.
      self.assertCountEqual([u[0][0] for u in order], [u[0][0] for u in units])
      for part in (order[:split], order[split:]):
        self.assertEqual(size(part), sorted(size(part), reverse=True))

  @pytest.mark.slow
  def test_compiled_rows_reuse_the_trained_run(self):
    tmp = self.create_tempdir().full_path
    config = (
        os.path.join(ROOT, "configs", "dyck_table.py")
        + ":smoke,kinds=trained,variants=attn,seeds=2,mixes=hard"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.sweep",
            f"--config={config}",
            f"--workdir={tmp}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(tmp, "table.json")) as f:
      rows = {r["kind"]: r for r in json.load(f)["rows"]}
    self.assertEqual(
        sorted(rows), ["compiled_random", "compiled_sparse", "trained"]
    )
    for kind in ("compiled_random", "compiled_sparse"):
      self.assertGreaterEqual(rows[kind]["agreement_min"], 0.999)
      for name in rows[kind]["runs"].split(";"):
        with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
          got = json.load(f)
        target = name.replace(f"_compiled={kind.split('_')[1]}", "")
        self.assertEqual(got["target_dir"], os.path.join(tmp, "runs", target))
        with open(os.path.join(tmp, "runs", target, "metrics.json")) as f:
          self.assertEqual(
              got["target_accuracy"], json.load(f)["eval_accuracy"]
          )
        self.assertFalse(
            os.path.exists(os.path.join(tmp, "runs", name, "target"))
        )

  @pytest.mark.slow
  def test_a_diverged_run_is_recorded_and_the_sweep_goes_on(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "diverges")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    names = [n for n, _ in sweep.collect_runs(sweep_config, "diverges")]
    bad, _, bad_target, bad_compiled = names
    got = {}
    for name in names:
      with open(os.path.join(tmp, "runs", name, "metrics.json")) as f:
        got[name] = json.load(f)
    self.assertTrue(np.isnan(got[bad]["eval_accuracy"]))
    self.assertRegex(got[bad]["diverged"], r"loss became nan at step 3")
    # A compiled-UT run whose target diverged is recorded too, not retrained.
    self.assertTrue(np.isnan(got[bad_compiled]["eval_accuracy"]))
    self.assertEqual(
        got[bad_compiled]["diverged"],
        "its target diverged: " + got[bad_target]["diverged"],
    )
    self.assertFalse(
        os.path.exists(os.path.join(tmp, "runs", bad_compiled, "target"))
    )
    with open(os.path.join(tmp, "table.json")) as f:
      rows = {(r["kind"], r["lr"]): r for r in json.load(f)["rows"]}
    self.assertTrue(np.isnan(rows["random", 1e30]["accuracy_mean"]))
    self.assertTrue(np.isnan(rows["compiled_sparse", 1e30]["accuracy_mean"]))
    healthy = [
        r for (kind, lr), r in rows.items() if kind == "trained" and lr < 1
    ]
    self.assertTrue(np.isfinite(healthy[0]["accuracy_mean"]))

  @pytest.mark.slow
  def test_a_diverged_run_in_a_vmapped_group_is_recorded(self):
    tmp = self.create_tempdir().full_path
    proc = run_sweep_cli(tmp, 1, "diverges_in_group", "--batching=vmap")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    (bad, _), (good, good_config) = sweep.collect_runs(
        sweep_config, "diverges_in_group"
    )
    with open(os.path.join(tmp, "runs", bad, "metrics.json")) as f:
      got = json.load(f)
    self.assertTrue(np.isnan(got["eval_accuracy"]))
    self.assertRegex(
        got["diverged"], r"loss became nan at step \d+ \(last finite"
    )
    # The other run of the group trained on, as it would alone.
    with open(os.path.join(tmp, "runs", good, "metrics.json")) as f:
      got = json.load(f)
    want = train.train_and_evaluate(good_config, os.path.join(tmp, "single"))
    self.assertEqual(got["eval_accuracy"], want["eval_accuracy"])
    np.testing.assert_allclose(
        got["param_checksum"], want["param_checksum"], rtol=1e-5
    )

  def test_bad_override_or_schedule_is_named_before_training(self):
    def module(overrides):
      return types.SimpleNamespace(
          get_config=sweep_config.get_config,
          sweep=lambda add: add("model=random,smoke", **overrides),
      )

    for overrides, pattern in (
        (
            {"trian.lr": 1e-2},
            r"override 'trian.lr': no such config field "
            r"\(fields here: .*train",
        ),
        ({"train.lr.x": 1}, r"override 'train.lr.x': no such config field"),
        ({"train.lrr": 1}, r"override 'train.lrr': no such config field"),
        (
            {"eval.every": 0},
            r"run .*eval.every=0: config.eval.every=0; use an " r"integer >= 1",
        ),
    ):
      with self.assertRaisesRegex(UserError, pattern):
        sweep.collect_runs(module(overrides))
    table = sweep.load_config_module(
        os.path.join(ROOT, "configs", "khop_table.py")
    )
    with self.assertRaisesRegex(UserError, r"seeds=0; use 1 or more"):
      sweep.collect_runs(table, "smoke,seeds=0")

  @pytest.mark.slow
  def test_workers_must_be_positive(self):
    proc = run_sweep_cli(
        self.create_tempdir().full_path, 1, "kinds", "--workers=0"
    )
    cli_helpers.assert_one_line_error(self, proc, r"--workers=0; use 1 or more")


if __name__ == "__main__":
  absltest.main()
