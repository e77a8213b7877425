"""The real training loop (STYLE 13): `train.train_and_evaluate(smoke_config,
tmpdir)` writes its outputs, reruns and repeats exactly, and trains only the
leaves it should.

What the loop's parts do inside a run is tested beside them: checkpoint_test,
loop_test, optimizer_test, step_test, held_out_test, implementation_test,
records_test; the command line (`python -m launch.train`, a SIGKILL and a
resume included) in tests/launch/train_test.py.
"""

import glob
import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from tests import train_helpers
from tests import xla_settings
from ut.training import checkpoint
from ut.training import loop
from ut.training import models
from ut.training import train


def labels_by_name(params, spec):
  return train_helpers.leaves_by_name(models.labels(params, spec), convert=str)


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  @parameterized.parameters("dyck", "khop")
  def test_smoke_run_writes_outputs_and_rerun_keeps_them(self, task):
    config = train_helpers.smoke_config(task)
    workdir = self.create_tempdir().full_path
    final = train.train_and_evaluate(config, workdir)
    steps = config.train.steps

    metrics = train_helpers.read_json(os.path.join(workdir, "metrics.json"))
    self.assertEqual(metrics["step"], steps)
    for key in train_helpers.FINAL_KEYS:
      self.assertEqual(metrics[key], final[key], key)
      self.assertTrue(np.isfinite(metrics[key]), (key, metrics[key]))
    self.assertBetween(metrics["eval_accuracy"], 0.0, 1.0)
    self.assertEqual(metrics["task"], task)
    self.assertIn("git_commit", metrics["provenance"])

    train_rows = train_helpers.read_csv(
        os.path.join(workdir, "train_metrics.csv")
    )
    self.assertEqual(
        list(train_rows[0]),
        ["step", "loss", "accuracy", "grad_norm", "lr", "steps_per_sec"],
    )
    log_steps = list(
        range(config.train.log_every, steps + 1, config.train.log_every)
    )
    self.assertEqual([int(r["step"]) for r in train_rows], log_steps)
    self.assertEqual(float(train_rows[-1]["loss"]), metrics["final_train_loss"])
    eval_rows = train_helpers.read_csv(
        os.path.join(workdir, "eval_metrics.csv")
    )
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
        train_helpers.read_json(os.path.join(workdir, "config.json")),
        json.loads(config.to_json_best_effort()),
    )

    # Running the finished command again resumes at the last step: nothing to
    # train, and the same final metrics (not a final_train_loss of None).
    with open(os.path.join(workdir, "train_metrics.csv")) as f:
      train_csv = f.read()
    again = train.train_and_evaluate(config, workdir)
    for key in train_helpers.FINAL_KEYS:
      self.assertEqual(again[key], final[key], key)
    self.assertEqual(
        train_helpers.read_json(os.path.join(workdir, "metrics.json"))[
            "final_train_loss"
        ],
        final["final_train_loss"],
    )
    with open(os.path.join(workdir, "train_metrics.csv")) as f:
      self.assertEqual(f.read(), train_csv)

  def test_frozen_leaves_are_bit_identical_after_training(self):
    config = train_helpers.smoke_config(arg="model=random,variant=res_ln_mlp")
    workdir = self.create_tempdir().full_path
    final = train.train_and_evaluate(config, workdir)
    params, spec, _, _, step = checkpoint.restore_params(workdir)
    self.assertEqual(step, config.train.steps)
    # The checkpoint keeps no frozen leaf (restore_params takes them from the
    # initial state); the trained state's checksum covers them all.
    self.assertEqual(loop.param_checksum(params), final["param_checksum"])
    before, after = train_helpers.initial_params(
        config
    ), train_helpers.leaves_by_name(params)
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

  def test_trained_kind_updates_every_weight(self):
    config = train_helpers.smoke_config(arg="model=trained,variant=res_ln_mlp")
    workdir = self.create_tempdir().full_path
    train.train_and_evaluate(config, workdir)
    params, spec, _, _, _ = checkpoint.restore_params(workdir)
    self.assertEqual(set(labels_by_name(params, spec).values()), {"train"})
    before, after = train_helpers.initial_params(
        config
    ), train_helpers.leaves_by_name(params)
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

  def test_two_runs_are_identical(self):
    config = train_helpers.smoke_config()
    dirs = [self.create_tempdir().full_path for _ in range(2)]
    finals = [train.train_and_evaluate(config, d) for d in dirs]
    for key in train_helpers.FINAL_KEYS:
      self.assertEqual(finals[0][key], finals[1][key], key)
    self.assertEqual(
        *[
            train_helpers.read_csv(
                os.path.join(d, "train_metrics.csv"),
                train_helpers.TRAIN_COLUMNS,
            )
            for d in dirs
        ]
    )
    self.assertEqual(
        *[
            train_helpers.read_csv(os.path.join(d, "eval_metrics.csv"))
            for d in dirs
        ]
    )
    params = [
        train_helpers.leaves_by_name(checkpoint.restore_params(d)[0])
        for d in dirs
    ]
    for name in params[0]:
      np.testing.assert_array_equal(params[0][name], params[1][name], name)


if __name__ == "__main__":
  absltest.main()
