"""ut.training.checkpoint: what a checkpoint holds, resumes from it (and from
the whole-state format before), the frozen sums, and init_params files."""

import json
import os
import shutil

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import orbax.checkpoint as ocp

from configs import khop as khop_config
from tests import cli_helpers
from tests import train_helpers
from tests import xla_settings
from ut.errors import UserError
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import models
from ut.training import train


def _spec(config):
  return models.model_spec(config, data_lib.make_task(config).info)


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  def test_checkpoint_keeps_trainable_leaves_and_resumes(self):
    """A checkpoint holds the step, the trainable leaves and the optimizer
    state, not the frozen UT; resuming from it ends as the uninterrupted run,
    and a checkpoint of another tree (the whole TrainState) is refused."""
    config = train_helpers.smoke_config(arg="model=random,variant=res_ln_mlp")
    self.assertEqual(
        (config.train.steps, config.train.checkpoint_every), (4, 2)
    )
    whole = self.create_tempdir("whole").full_path
    want = train.train_and_evaluate(config, whole)

    before = train_helpers.initial_params(config)
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

    def whole_state(workdir):  # Not what checkpoints hold.
      shutil.rmtree(os.path.join(workdir, "checkpoints", "2"))
      old = checkpoint.checkpoint_manager(workdir)
      old.save(2, args=ocp.args.StandardSave(state))
      old.wait_until_finished()
      self.assertIn("layers", old.item_metadata(2).tree["params"])
      old.close()

    got = resume("compact", lambda _: None)
    for key in train_helpers.FINAL_KEYS:
      self.assertEqual(got[key], want[key], key)
    cli_helpers.assert_user_error(
        self,
        r"checkpoints/2 holds opt_state, params, step, not the opt_state, "
        r"step, trainable of this code's checkpoints",
        resume,
        "whole_state",
        whole_state,
    )

    # The run recorded its frozen leaves' sums; a resume onto another draw
    # (here: a sum changed by 1e-4 of itself) is refused and trains nothing.
    sums_path = os.path.join(whole, checkpoint.FROZEN_SUMS)
    sums = train_helpers.read_json(sums_path)
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


class InitParamsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.config = khop_config.get_config("model=sparse,variant=attn,smoke")
    self.spec = _spec(self.config)
    self.drawn = checkpoint.init_state(self.config, self.spec)[0].params
    self.path = os.path.join(self.create_tempdir().full_path, "init.npz")

  def test_named_leaves_are_replaced_and_others_kept(self):
    token = np.arange(
        np.prod(self.drawn["embed"]["token"].shape), dtype=np.float32
    ).reshape(self.drawn["embed"]["token"].shape)
    np.savez(self.path, **{"embed/token": token})
    self.config.train.init_params = self.path
    params = checkpoint.init_state(self.config, self.spec)[0].params
    np.testing.assert_array_equal(params["embed"]["token"], token)
    for got, want in (
        (params["embed"]["position"], self.drawn["embed"]["position"]),
        (params["unembed"], self.drawn["unembed"]),
    ):
      np.testing.assert_array_equal(got, want)
    # A restore builds the tree without the file.
    os.remove(self.path)
    params = checkpoint.init_state(self.config, self.spec, warm_start=False)[
        0
    ].params
    jax.tree.map(np.testing.assert_array_equal, params, self.drawn)

  def test_bad_files_are_user_errors(self):
    shape = self.drawn["unembed"].shape
    cases = (
        ({"embed/tok": np.zeros(3)}, r"'embed/tok' is not a trainable leaf"),
        (
            {"unembed": np.zeros((2, 2))},
            rf"unembed has shape \(2, 2\); this "
            rf"model's is \({shape[0]}, {shape[1]}\)",
        ),
        ({"unembed": np.full(shape, np.nan)}, r"must hold finite floats"),
    )
    self.config.train.init_params = self.path
    for arrays, pattern in cases:
      np.savez(self.path, **arrays)
      cli_helpers.assert_user_error(
          self, pattern, checkpoint.init_state, self.config, self.spec
      )
    with open(self.path, "w") as f:
      f.write("not an npz")
    cli_helpers.assert_user_error(
        self,
        r"is not a readable .npz file",
        checkpoint.init_state,
        self.config,
        self.spec,
    )


if __name__ == "__main__":
  absltest.main()
