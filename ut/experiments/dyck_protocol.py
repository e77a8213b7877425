"""Zhong & Andreas's Dyck-1 protocol: held-out sets and breakdowns (DESIGN §7).

A Dyck config with fixed held-out sets (`ut.training.data.Dyck`: a validation
set scored during training, a test set scored at the end, neither ever
trained on) is reported here:

  seen_in_training(config)   share of each held-out set among the strings of
                             the run's training stream (0 by construction)
  counting_report(config)    each held-out set's sizes and the counting
                             baseline's breakdown (`dyck.breakdown`)
  workdir_report(workdir)    a trained run's breakdown on each held-out set,
                             beside the counting baseline's
  mean_breakdown(...)        the seed mean of several runs' breakdowns
  table_breakdowns(...)      a sweep table's rows, each its seeds' mean test
                             breakdown beside the counting baseline
  markdown(...)              one table per report

"Short" strings have at most `dyck.SHORT` (10) brackets. Every balanced string
that short in a held-out set is never trained on; `short_balanced_held_out`
counts how many of all of them (64 up to 10 brackets) the held-out sets hold.
"""

import math

import numpy as np

from ut.errors import UserError
from ut.training import data as data_lib
from ut.training import evaluate
from ut.training.tasks import dyck

SPLITS = ("valid", "test")


def _task(config):
  if config.task != "dyck":
    raise UserError(
        f"the Dyck protocol needs a Dyck config; got task " f"{config.task!r}"
    )
  task = data_lib.make_task(config)
  if not task.sets:
    raise UserError(
        "this Dyck config has no fixed held-out sets; set "
        "config.data.valid_num and config.data.test_num (as "
        "configs/dyck.py does)"
    )
  return task


def _splits(task):
  return [s for s in SPLITS if s in task.sets]


def seen_in_training(config, task=None):
  """{split: share of the split's strings that occur among the training
  strings}: all config.train.steps batches of `data.train_batch`, compared
  by their token rows (`dyck.keys`)."""
  task = task or _task(config)
  split_keys = {s: dyck.keys(task.sets[s][0]) for s in _splits(task)}
  seen = {s: np.zeros(len(k), bool) for s, k in split_keys.items()}
  for step in range(config.train.steps):
    tokens_BxT = data_lib.train_batch(config, task, step)["tokens"]
    trained = np.unique(dyck.keys(tokens_BxT))
    for s, k in split_keys.items():
      seen[s] |= dyck.contains(trained, k)
  return {s: float(v.mean()) for s, v in seen.items()}


def _short_balanced_total(max_len):
  """The number of balanced strings of 2..min(SHORT, max_len) brackets."""
  return sum(
      math.comb(2 * n, n) // (n + 1)
      for n in range(1, min(dyck.SHORT, max_len) // 2 + 1)
  )


def split_summary(task, split):
  """Sizes of one held-out set: num, distinct strings, balanced share."""
  tokens_BxT, labels_B = task.sets[split]
  return dict(
      num=len(tokens_BxT),
      distinct=len(np.unique(dyck.keys(tokens_BxT))),
      balanced=float(labels_B.mean()),
  )


def short_balanced_held_out(task):
  """dict(held_out, total): the distinct balanced strings of at most SHORT
  brackets in the held-out sets, and how many such strings there are."""
  texts = {
      t
      for s in _splits(task)
      for t in dyck.decode(task.sets[s][0])
      if len(t) <= dyck.SHORT and dyck.is_balanced(t)
  }
  return dict(
      held_out=len(texts), total=_short_balanced_total(task.cfg.max_len)
  )


def counting_report(config, task=None):
  """The held-out sets of a Dyck config and the counting baseline on them:
  {split: dict(**split_summary, counting=dyck.breakdown)} and
  short_balanced (`short_balanced_held_out`)."""
  task = task or _task(config)
  out = {}
  for split in _splits(task):
    tokens_BxT, labels_B = task.sets[split]
    texts = dyck.decode(tokens_BxT)
    out[split] = dict(
        split_summary(task, split),
        counting=dyck.breakdown(
            texts, labels_B, dyck.counting_baseline(texts), task.cfg.max_len
        ),
    )
  out["short_balanced"] = short_balanced_held_out(task)
  return out


def workdir_report(workdir):
  """A trained Dyck run on its held-out sets: {split: dict(**split_summary,
  model=breakdown, counting=breakdown)}, with the run's step."""
  model = evaluate.load(workdir)
  if not isinstance(model.task, data_lib.Dyck) or not model.task.sets:
    raise UserError(
        f"{model.workdir} is not a Dyck run with fixed held-out "
        f"sets (configs/dyck.py has them)"
    )
  out = dict(step=model.step, workdir=model.workdir)
  for split in _splits(model.task):
    out[split] = dict(
        split_summary(model.task, split),
        **model.task.breakdown(
            model.task.held_out(split),
            evaluate.predict_classes(
                model.params, model.spec, model.task.held_out(split)["tokens"]
            ),
        ),
    )
  return out


def breakdown_rows(columns):
  """Rows of a markdown table from {column name: dyck.breakdown}: one row per
  part (all, length buckets, subsets, short balanced), 'n' and accuracy (%)
  cells per column."""
  first = next(iter(columns.values()))
  parts = (
      [("all", lambda b: b)]
      + [
          (f"length {k}", lambda b, k=k: b["by_length"][k])
          for k in first["by_length"]
      ]
      + [
          (name.replace("_", " "), lambda b, n=name: b["by_subset"][n])
          for name in dyck.SUBSETS
      ]
      + [(f"short balanced (<= {dyck.SHORT})", lambda b: b["short_balanced"])]
  )
  rows = []
  for label, get in parts:
    row = dict(part=label)
    for name, b in columns.items():
      cell = get(b)
      row[f"{name} n"] = cell["num"]
      row[f"{name} %"] = (
          "" if cell["accuracy"] is None else f"{100 * cell['accuracy']:.2f}"
      )
    rows.append(row)
  return rows


def mean_breakdown(breakdowns):
  """The mean over runs of `dyck.breakdown`s of one held-out set: the same
  parts and counts, each accuracy the mean of the runs' (None if any is)."""
  first = breakdowns[0]

  def mean(cells):
    if len({c["num"] for c in cells}) != 1:
      raise ValueError(
          f"breakdowns of different sets: parts of {[c['num'] for c in cells]} "
          "strings"
      )
    accuracies = [c["accuracy"] for c in cells]
    if any(a is None for a in accuracies):
      return dict(num=cells[0]["num"], accuracy=None)
    return dict(num=cells[0]["num"], accuracy=float(np.mean(accuracies)))

  return dict(
      mean(breakdowns),
      by_length={
          k: mean([b["by_length"][k] for b in breakdowns])
          for k in first["by_length"]
      },
      by_subset={
          k: mean([b["by_subset"][k] for b in breakdowns])
          for k in first["by_subset"]
      },
      short_balanced=mean([b["short_balanced"] for b in breakdowns]),
  )


def table_breakdowns(metrics_by_row):
  """{mix: {column: breakdown}} for a Dyck sweep table: metrics_by_row maps
  (mix, row label) to its runs' recorded metrics (with `test_breakdown`, as
  `train.train_and_evaluate` writes it). Each mix's first column is the
  counting baseline on its test set, then each row's seed mean."""
  out = {}
  for (mix, label), runs in metrics_by_row.items():
    runs = [m for m in runs if m.get("test_breakdown")]
    if not runs:
      continue
    columns = out.setdefault(
        mix, {"counting": runs[0]["test_breakdown"]["counting"]}
    )
    columns[label] = mean_breakdown(
        [m["test_breakdown"]["model"] for m in runs]
    )
  return out
