"""Evaluating a trained workdir on data made elsewhere (JSONL) or on one text.

  python -m launch.evaluate --workdir=W --data=FILE.jsonl --out=REPORT.json
  python -m launch.predict --workdir=W --text="(()" [--k=2]

Shape glossary: B batch, T tokens, C classes.

`evaluate_jsonl(workdir, data_path)` scores the latest checkpoint of a training
workdir on a JSONL file, one JSON object per line, exactly as training scores
its held-out set: over the positions where the task's `mask` is True, the
prediction is the argmax of the logits.

  Dyck:  {"text": "(()())", "label": 1}      1 = balanced, 0 = not
  k-hop: {"text": "abacab", "k": 2, "label": "_____b"}
         one label character per text character: the hop-k letter, or '_'
         where a hop finds nothing; only letter positions are scored. "k" may
         be left out for a model trained with one fixed k.

A missing "label" is computed by the task (ut/training/tasks); the report counts such
lines and the lines whose given label disagrees with the task's definition.
Lines longer than the model's position table are skipped with one log line
each (the first 20) and counted; empty lines are ignored. Rows of equal token
length run as one batch, so a file of thousands of lines takes seconds. Anything else wrong with a line
(invalid JSON, no "text", a character outside the alphabet) raises UserError
naming the file and the 1-based line number.

For Dyck the report also holds `breakdown`: accuracy by length bucket, by
subset (balanced; unbalanced with unequal or equal counts) and on the short
balanced strings (`dyck.breakdown`).

A run's fixed test set is scored in its final metrics by
`held_out.test_metrics`.

`predict_text(workdir, text, k=None)` gives the model's prediction for one text
beside the task's ground truth. Both accept a workdir path or the result of
`load(workdir)`, so a notebook restores the checkpoint once:

  model = evaluate.load("/tmp/w")
  evaluate.predict_text(model, "(()")
  evaluate.evaluate_jsonl(model, "data.jsonl")
"""

import codecs
import collections
import dataclasses
import json
import os
import re

from absl import logging
import jax
import ml_collections
import numpy as np

from ut.errors import UserError
from ut.io import reports
from ut.training import data as data_lib
from ut.training import models
from ut.training import precision
from ut.training import checkpoint
from ut.training import held_out
from ut.training.tasks import dyck
from ut.training.tasks import khop

BATCH_SIZE = 256  # Most rows per forward pass.
MIN_BATCH = 32  # Fewest rows per forward pass (padded by repetition).
MAX_LISTED_LINES = 20  # Line numbers kept in the report per kind of event.

_apply = jax.jit(models.apply, static_argnums=1)


@dataclasses.dataclass(frozen=True)
class Restored:
  """The latest checkpoint of a training workdir, ready to run."""

  params: dict
  spec: models.ModelSpec
  config: ml_collections.ConfigDict
  task: object
  step: int
  workdir: str


def load(workdir):
  """Restores the latest checkpoint of `workdir` (a path, or a Restored)."""
  if isinstance(workdir, Restored):
    return workdir
  if not os.path.isdir(workdir):
    raise UserError(
        f"workdir {workdir} does not exist; pass the --workdir "
        f"of a training run (python -m launch.train --workdir=...)"
    )
  params, spec, config, task, step = checkpoint.restore_params(workdir)
  return Restored(params, spec, config, task, step, os.path.abspath(workdir))


def evaluate_jsonl(workdir, data_path, out_path=None, overwrite=False):
  """Accuracy of the latest checkpoint of `workdir` on a JSONL file.

  Args:
    workdir: a training workdir, or `load(workdir)`.
    data_path: the JSONL file; see the module docstring for the formats.
    out_path: where to write the report as JSON (optional).
    overwrite: replace an existing `out_path`.

  Returns:
    The report dict (also written to `out_path` when given).
  """
  if out_path:
    reports.check_output(out_path, overwrite, "--overwrite", inputs=[data_path])
  lines = _read_lines(data_path)
  if not lines:
    raise UserError(f"{data_path} has no examples (every line is empty)")
  model = load(workdir)
  examples, too_long, no_label, disagree = [], [], [], []
  for number, obj in lines:
    try:
      row = model.task.encode_example(obj, model.spec.max_len)
    except data_lib.TooLong as e:
      too_long.append(number)
      if len(too_long) <= MAX_LISTED_LINES:
        logging.warning(
            "%s line %d: %d characters (%d tokens) exceed the "
            "model's position table (%d tokens); skipped",
            data_path,
            number,
            len(obj["text"]),
            e.length,
            e.max_len,
        )
      continue
    except ValueError as e:  # UserError, or a ValueError from ut/tasks.
      raise UserError(f"{data_path} line {number}: {_clean(e)}") from None
    if obj.get("label") is None:
      no_label.append(number)
    elif _disagrees_with_task(model.task, obj, row, model.spec.max_len):
      disagree.append(number)
    examples.append((number, obj, row))
  if len(too_long) > MAX_LISTED_LINES:
    logging.warning(
        "%s: %d more lines exceed the position table; skipped",
        data_path,
        len(too_long) - MAX_LISTED_LINES,
    )
  if not examples:
    raise UserError(
        f"{data_path}: all {len(too_long)} lines exceed the "
        f"model's position table ({model.spec.max_len} tokens); "
        f"nothing to evaluate"
    )
  correct, scored = _score(model, [row for _, _, row in examples])
  report = _report(
      model, data_path, examples, correct, scored, too_long, no_label, disagree
  )
  if model.config.task == "dyck":
    labels = np.array([int(row["labels"][0, -1]) for _, _, row in examples])
    report["breakdown"] = dyck.breakdown(
        [obj["text"] for _, obj, _ in examples],
        labels,
        np.where(correct > 0, labels, 1 - labels),
    )
  if out_path:
    report["out"] = os.path.abspath(out_path)
    reports.write_json(out_path, report)
  return report


def predict_text(workdir, text, k=None):
  """The model's prediction for one text, beside the task's ground truth.

  Args:
    workdir: a training workdir, or `load(workdir)`.
    text: a Dyck string of '(' and ')', or a k-hop string of letters.
    k: k-hop only: the number of hops (default: the model's fixed k).

  Returns:
    dict(text, prediction, truth, num_scored, num_correct, step, ...), with
    `balanced_prob` for Dyck and `k` for k-hop. Dyck predictions and truths
    are 1 (balanced) or 0; k-hop ones are strings with one letter or '_' per
    text character. num_scored counts the positions scored as in training.
  """
  model = load(workdir)
  obj = {"text": text}
  is_khop = model.config.task == "khop"
  if k is not None and not is_khop:
    raise UserError(
        f"k applies to k-hop models only; {model.workdir} holds a "
        f"{model.config.task} model"
    )
  if k is None and is_khop and model.task.k_range:
    raise UserError(
        f"this model was trained for k in {model.task.k_range}; "
        f"pass k (--k=...)"
    )
  if k is not None:
    obj["k"] = k
  try:
    row = model.task.encode_example(obj, model.spec.max_len)
  except ValueError as e:
    raise UserError(_clean(e)) from None
  logits_BxTxC = _logits(model, row["tokens"])
  row0 = {key: value[0] for key, value in row.items()}
  out = {"text": text}
  out.update(model.task.describe(logits_BxTxC[0], row0))
  if is_khop:
    out["k"] = k if k is not None else model.task.k
    labels = row0["labels"][1:] if model.task.k_range else row0["labels"]
    out["truth"] = khop.decode_label(labels, model.task.cfg.alphabet)
  else:
    out["truth"] = int(row0["labels"][-1])
  pred_T = np.argmax(logits_BxTxC[0], axis=-1)
  out["num_scored"] = int(row0["mask"].sum())
  out["num_correct"] = int(((pred_T == row0["labels"]) & row0["mask"]).sum())
  out["step"] = model.step
  return out


def predict_classes(params, spec, tokens_BxT):
  """Argmax classes (B, T) of the model on tokens (B, T), BATCH_SIZE rows at
  a time (the last batch padded by repetition: one compiled shape)."""
  tokens_BxT = np.asarray(tokens_BxT)
  out = []
  for start in range(0, len(tokens_BxT), BATCH_SIZE):
    chunk = tokens_BxT[start : start + BATCH_SIZE]
    padded = np.concatenate(
        [chunk, np.repeat(chunk[:1], BATCH_SIZE - len(chunk), axis=0)]
    )
    out.append(
        np.asarray(_apply(params, spec, padded)).argmax(-1)[: len(chunk)]
    )
  return np.concatenate(out) if out else np.zeros(tokens_BxT.shape, np.int64)


def summary_line(report):
  """One line for the terminal: accuracy, counts, skipped lines."""
  acc = report["accuracy"]
  text = (f"accuracy {acc:.4f}" if acc is not None else "accuracy n/a") + (
      f" ({report['num_correct']}/{report['num_scored_positions']} scored "
      f"positions, {report['num_examples']} examples) at step {report['step']}"
  )
  skipped = report["num_skipped_too_long"]
  if skipped:
    text += (
        f"; {_lines(skipped)} skipped (longer than the position table, "
        f"{report['position_table']} tokens)"
    )
  disagree = report["num_labels_disagreeing_with_task"]
  if disagree:
    text += f"; {_lines(disagree)} with a label unlike the task's definition"
  return text


def prediction_line(result):
  """One or two lines for the terminal from a `predict_text` result."""
  if "balanced_prob" in result:
    word = lambda b: "balanced" if b else "not balanced"
    return (
        f"{result['text']!r}: predicted {word(result['prediction'])} "
        f"(balanced prob {result['balanced_prob']:.3f}); truth "
        f"{word(result['truth'])}"
    )
  return (
      f"{result['text']!r} k={result['k']}\n"
      f"  predicted {result['prediction']}\n"
      f"  truth     {result['truth']}  ({result['num_correct']}/"
      f"{result['num_scored']} letter positions correct)"
  )


def _read_lines(path):
  """[(1-based line number, dict)] for the non-empty lines of a JSONL file."""
  if not os.path.isfile(path):
    raise UserError(
        f"{path} is not a file"
        if os.path.exists(path)
        else f"data file {path} does not exist"
    )
  with open(path, "rb") as f:
    raw = f.read().removeprefix(codecs.BOM_UTF8).split(b"\n")
  out = []
  for number, line in enumerate(raw, start=1):
    try:
      line = line.decode("utf-8").strip()
    except UnicodeDecodeError:
      raise UserError(
          f"{path} line {number}: not UTF-8 text; the data must be "
          f"JSONL (one JSON object per line)"
      ) from None
    if not line:
      continue
    try:
      obj = json.loads(line)
    except json.JSONDecodeError as e:
      raise UserError(
          f"{path} line {number}: invalid JSON ({e.msg} at column "
          f"{e.colno}); each line must be one JSON object such as "
          f'{{"text": ..., "label": ...}}'
      ) from None
    if not isinstance(obj, dict):
      raise UserError(
          f"{path} line {number}: expected a JSON object such "
          f'as {{"text": ..., "label": ...}}, got '
          f"{type(obj).__name__}"
      )
    out.append((number, obj))
  return out


def _lines(n):
  return f"{n} line" + ("" if n == 1 else "s")


def _clean(error):
  """A task error's message without the batch index of ut/training/tasks encoders."""
  return re.sub(r"^text \d+: ", "", str(error))


def _disagrees_with_task(task, obj, row, max_len):
  """True when the given label and the task's differ on a scored position."""
  truth = task.encode_example(
      {k: v for k, v in obj.items() if k != "label"}, max_len
  )
  return bool(
      np.any((row["labels"] != truth["labels"]) & (row["mask"] | truth["mask"]))
  )


def _score(model, rows):
  """Per-row (correct, scored) counts; rows of equal length run as one batch."""
  groups = collections.defaultdict(list)
  for i, row in enumerate(rows):
    groups[row["tokens"].shape[1]].append(i)
  correct = np.zeros(len(rows), np.int64)
  scored = np.zeros(len(rows), np.int64)
  for indices in groups.values():
    for start in range(0, len(indices), BATCH_SIZE):
      chunk = indices[start : start + BATCH_SIZE]
      batch = {
          key: np.concatenate([rows[i][key] for i in chunk])
          for key in ("tokens", "labels", "mask")
      }
      pred_BxT = _logits(model, batch["tokens"]).argmax(-1)
      hit_BxT = (pred_BxT == batch["labels"]) & batch["mask"]
      correct[chunk] = hit_BxT.sum(axis=1)
      scored[chunk] = batch["mask"].sum(axis=1)
  return correct, scored


def _logits(model, tokens_BxT):
  """Logits (B, T, C) as numpy for tokens (B, T).

  B is padded to a power of 2 (at least MIN_BATCH, at most BATCH_SIZE) so that
  a file of many lengths, and `predict_text`, reuse a few compiled shapes.
  """
  b = tokens_BxT.shape[0]
  padded = min(BATCH_SIZE, max(MIN_BATCH, 1 << (b - 1).bit_length()))
  if padded > b:
    tokens_BxT = np.concatenate(
        [tokens_BxT, np.repeat(tokens_BxT[:1], padded - b, axis=0)]
    )
  with precision.scope(model.config):  # The run's own matmul precision.
    return np.asarray(_apply(model.params, model.spec, tokens_BxT))[:b]


def _report(
    model, data_path, examples, correct, scored, too_long, no_label, disagree
):
  """The report dict of `evaluate_jsonl`."""
  total_correct, total_scored = int(correct.sum()), int(scored.sum())
  has_scored = scored > 0
  line_acc = correct[has_scored] / scored[has_scored]
  by_length = collections.defaultdict(lambda: [0, 0, 0])
  for (_, obj, _), c, s in zip(examples, correct, scored):
    entry = by_length[len(obj["text"])]
    entry[0] += 1
    entry[1] += int(c)
    entry[2] += int(s)
  config = model.config
  report = {
      "accuracy": total_correct / total_scored if total_scored else None,
      "num_correct": total_correct,
      "num_scored_positions": total_scored,
      "num_examples": len(examples),
      "num_skipped_too_long": len(too_long),
      "skipped_too_long_lines": too_long[:MAX_LISTED_LINES],
      "position_table": model.spec.max_len,
      # Per line: the fraction of lines whose every scored position is right,
      # and the mean of per-line accuracies (lines with a scored position).
      "exact_match": float(np.mean(line_acc == 1)) if line_acc.size else None,
      "mean_line_accuracy": float(np.mean(line_acc)) if line_acc.size else None,
      "num_lines_without_scored_positions": int((~has_scored).sum()),
      "by_text_length": {
          str(n): {
              "examples": e,
              "accuracy": c / s if s else None,
              "scored_positions": s,
          }
          for n, (e, c, s) in sorted(by_length.items())
      },
      "num_labels_from_task": len(no_label),
      "labels_from_task_lines": no_label[:MAX_LISTED_LINES],
      "num_labels_disagreeing_with_task": len(disagree),
      "disagreeing_lines": disagree[:MAX_LISTED_LINES],
      "step": model.step,
      "workdir": model.workdir,
      "data": os.path.abspath(data_path),
      "task": config.task,
      "task_config": config.data.to_dict(),
      "kind": model.spec.kind,
      "variant": model.spec.variant,
      "model_width": model.spec.model_width,
      "provenance": reports.provenance(config),
  }
  return report
