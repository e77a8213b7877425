"""Smoke configs and readers of a training run's outputs, for the tests of
ut/training and launch.train."""

import csv
import json

import jax
import numpy as np

from configs import dyck as dyck_config
from configs import khop as khop_config
from ut.training import checkpoint
from ut.training import data as data_lib
from ut.training import models

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


def initial_params(config):
  """The parameters a run starts from, built independently of its workdir."""
  spec = models.model_spec(config, data_lib.make_task(config).info)
  state, _, _ = checkpoint.init_state(config, spec)
  return leaves_by_name(state.params)
