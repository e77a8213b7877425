"""Evaluating trained workdirs on JSONL data made elsewhere, and on one text.

The data and its labels come from plain Python here (brute-force references),
not from ut; the model's answers are recomputed through `models.apply` on
tokens built here from the vocabularies documented in ut/tasks.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import pytest

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import cli_helpers
from tests import paths
from tests import xla_settings
from ut.errors import UserError
from ut.training import evaluate
from ut.training import models
from ut.training import train

ROOT = paths.ROOT

# name -> (config, longest text that fits the position table).
DYCK = dyck_config.get_config("smoke")
MODELS = {
    "dyck": (DYCK, DYCK.data.max_len),
    "khop_range": (khop_config.get_config("smoke,k_max=2"), 8),
    "khop_fixed": (khop_config.get_config("smoke,k=2"), 8),
}


def ref_balanced(text):
  """Dyck-1 by cancelling '()' pairs until none is left."""
  while "()" in text:
    text = text.replace("()", "")
  return not text


def ref_hops(text, k):
  """k-hop labels straight from the definition: the letter, or '_'."""
  out = []
  for i in range(len(text)):
    position = i
    for _ in range(k):
      j = text.rfind(text[position], 0, position)
      if j < 0:
        out.append("_")
        break
      position = j + 1
    else:
      out.append(text[position])
  return "".join(out)


def make_lines(name, rng, num=40):
  """Lines (some blank), fitting (line, text, k, label), too-long lines."""
  _, fits = MODELS[name]
  lines, examples, too_long = [], [], []
  for i in range(num):
    if i % 13 == 5:
      lines.append("")
    if name == "dyck":  # Every Dyck row is padded to one shape.
      length = int(rng.integers(0, fits + 4))
    else:  # Few lengths, few compiles: shorter, as trained, too long.
      length = int(rng.choice([1, 3, 3, fits, fits, fits + 1, fits + 3]))
    if name == "dyck":
      text = "".join(rng.choice(list("()"), size=length))
      if i % 3 == 0:  # Balanced strings too: random ones rarely are.
        text = "()" * (length // 2)
      k, obj = None, {"text": text, "label": int(ref_balanced(text))}
    else:
      text = "".join(rng.choice(list("abcd"), size=length))
      k = int(rng.integers(1, 3)) if name == "khop_range" else 2
      obj = {"text": text, "label": ref_hops(text, k)}
      if name == "khop_range" or i % 2:
        obj["k"] = k
    lines.append(json.dumps(obj))
    if len(text) > fits:
      too_long.append(len(lines))
    else:
      examples.append((len(lines), text, k, obj["label"]))
  return lines, examples, too_long


def direct_tokens(name, text, k):
  """Tokens (1, T) from the vocabularies documented in ut/tasks."""
  if name == "dyck":  # Left PAD = 0; '(' = 1, ')' = 2; '?' = 3 last.
    pad = [0] * (DYCK.data.max_len - len(text))
    ids = pad + [1 if c == "(" else 2 for c in text] + [3]
  else:  # Letters 0..A-1; a range of k puts the hop token A + k first.
    ids = [ord(c) - ord("a") for c in text]
    if name == "khop_range":
      ids = [4 + k] + ids
  return np.array([ids], np.int32)


def direct_predictions(model, name, examples):
  """Argmax classes (T,) per example: models.apply, one batch per length."""
  apply = jax.jit(models.apply, static_argnums=1)
  tokens = [direct_tokens(name, text, k) for _, text, k, _ in examples]
  preds = [None] * len(tokens)
  for length in {t.shape[1] for t in tokens}:
    rows = [i for i, t in enumerate(tokens) if t.shape[1] == length]
    batch = np.concatenate([tokens[i] for i in rows])
    logits = apply(model.params, model.spec, batch)
    for i, p in zip(rows, np.asarray(logits).argmax(-1)):
      preds[i] = p
  return preds


def write(path, lines):
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")


def run_cli(module, *args):
  return subprocess.run(
      [sys.executable, "-m", module, *args],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      check=False,
  )


class EvaluateTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # Smoke models and many small forwards: compiling is most of the time.
    cls.enterClassContext(xla_settings.fast_compile())
    cls.root = tempfile.mkdtemp()
    cls.workdirs = {}
    for name, (config, _) in MODELS.items():
      cls.workdirs[name] = os.path.join(cls.root, name)
      train.train_and_evaluate(config, cls.workdirs[name])

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path

  @parameterized.parameters(*MODELS)
  def test_accuracy_matches_per_line_predictions(self, name):
    lines, examples, too_long = make_lines(name, np.random.default_rng(7), 80)
    self.assertNotEmpty(too_long)
    data, out = f"{self.tmp}/data.jsonl", f"{self.tmp}/report.json"
    write(data, lines)
    # Smoke models barely train (k-hop ones predict '_' everywhere); a random
    # readout makes the predictions vary, so both hits and misses are counted.
    model = evaluate.load(self.workdirs[name])
    rng = np.random.default_rng(1)
    unembed = rng.standard_normal(model.params["unembed"].shape, np.float32)
    model = dataclasses.replace(
        model, params={**model.params, "unembed": unembed}
    )
    report = evaluate.evaluate_jsonl(model, data, out)
    self.assertEqual(report["num_skipped_too_long"], len(too_long))
    self.assertEqual(
        report["skipped_too_long_lines"], too_long[: evaluate.MAX_LISTED_LINES]
    )
    self.assertEqual(report["num_examples"], len(examples))
    self.assertEqual(report["num_labels_disagreeing_with_task"], 0)

    direct = direct_predictions(model, name, examples)
    correct = scored = 0
    for (_, text, k, label), pred in zip(examples, direct):
      got = evaluate.predict_text(model, text, k=k if name != "dyck" else None)
      # The task's ground truth equals the brute-force reference here.
      self.assertEqual(got["truth"], label, text)
      if name == "dyck":
        self.assertEqual(got["prediction"], pred[-1])
        hits, count = int(pred[-1] == label), 1
      else:
        pred = pred[1:] if name == "khop_range" else pred
        self.assertEqual(
            got["prediction"],
            "".join("_" if p == 4 else "abcd"[p] for p in pred),
        )
        letters = [i for i, c in enumerate(label) if c != "_"]
        hits = sum(pred[i] == ord(label[i]) - ord("a") for i in letters)
        count = len(letters)
      self.assertEqual((got["num_correct"], got["num_scored"]), (hits, count))
      correct += hits
      scored += count
    self.assertBetween(correct, 1, scored - 1)
    self.assertEqual(report["num_correct"], correct)
    self.assertEqual(report["num_scored_positions"], scored)
    self.assertEqual(report["accuracy"], correct / scored)
    with open(out) as f:
      self.assertEqual(json.load(f), report)

  def test_wrong_labels_are_counted(self):
    data = os.path.join(self.tmp, "data.jsonl")
    write(
        data,
        [
            '{"text": "()", "label": 0}',
            '{"text": "(()"}',
            '{"text": ")(", "label": 0}',
        ],
    )
    report = evaluate.evaluate_jsonl(self.workdirs["dyck"], data)
    self.assertEqual(report["disagreeing_lines"], [1])
    self.assertEqual(report["labels_from_task_lines"], [2])

  @parameterized.named_parameters(
      (
          "bad_paren",
          "dyck",
          ['{"text": "()"}', "", '{"text": "(x)"}'],
          r"data.jsonl line 3: character 'x'",
      ),
      (
          "bad_letter",
          "khop_range",
          ['{"text": "abz", "k": 1}'],
          r"data.jsonl line 1: character 'z'",
      ),
      (
          "bad_label",
          "khop_fixed",
          ['{"text": "ab", "label": "_q"}'],
          r"line 1: label: character 'q'",
      ),
      (
          "bad_json",
          "dyck",
          ['{"text": "()"}', '{"text": "()"'],
          r"data.jsonl line 2: invalid JSON",
      ),
      ("no_text", "dyck", ['{"label": 1}'], r"line 1: .*\"text\""),
      ("not_object", "dyck", ['["()"]'], r"line 1: expected a JSON object"),
      (
          "wrong_k",
          "khop_fixed",
          ['{"text": "ab", "k": 1}'],
          r"line 1: k=1 but this model was trained for k=2",
      ),
      (
          "all_too_long",
          "dyck",
          ['{"text": "((((((((()"}'] * 2,
          r"all 2 lines exceed .* position table \(9 tokens\)",
      ),
      ("empty", "dyck", ["", " "], r"no examples"),
  )
  def test_bad_data_names_the_line(self, name, lines, pattern):
    data = os.path.join(self.tmp, "data.jsonl")
    write(data, lines)
    with self.assertRaisesRegex(UserError, pattern):
      evaluate.evaluate_jsonl(self.workdirs[name], data)

  def test_missing_files(self):
    with self.assertRaisesRegex(UserError, r"nope.jsonl does not exist"):
      evaluate.evaluate_jsonl(self.workdirs["dyck"], f"{self.tmp}/nope.jsonl")
    write(f"{self.tmp}/d.jsonl", ['{"text": "()"}'])
    with self.assertRaisesRegex(UserError, r"does not exist"):
      evaluate.evaluate_jsonl(f"{self.tmp}/nowhere", f"{self.tmp}/d.jsonl")
    with self.assertRaisesRegex(UserError, r"position table"):
      evaluate.predict_text(self.workdirs["dyck"], "()" * 5)
    with self.assertRaisesRegex(UserError, r"pass k"):
      evaluate.predict_text(self.workdirs["khop_range"], "abab")

  @pytest.mark.slow
  def test_command_line(self):
    lines, examples, too_long = make_lines("dyck", np.random.default_rng(3), 20)
    data, out = f"{self.tmp}/data.jsonl", f"{self.tmp}/report.json"
    write(data, lines)
    want = evaluate.evaluate_jsonl(self.workdirs["dyck"], data)
    args = [
        f"--workdir={self.workdirs['dyck']}",
        f"--data={data}",
        f"--out={out}",
    ]
    proc = run_cli("launch.evaluate", *args)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn(f"accuracy {want['accuracy']:.4f}", proc.stdout)
    self.assertIn(f"report in {out}", proc.stdout)
    skipped = [l for l in proc.stderr.splitlines() if "skipped" in l]
    self.assertLen(skipped, len(too_long), proc.stderr)
    for line, number in zip(skipped, too_long):
      self.assertRegex(
          line,
          rf"data.jsonl line {number}: \d+ characters "
          r"\(\d+ tokens\) exceed the model's position table "
          r"\(9 tokens\); skipped$",
      )
    with open(out) as f:
      self.assertEqual(json.load(f)["num_examples"], len(examples))

    with open(out, "rb") as f:
      before = f.read()
    proc = run_cli("launch.evaluate", *args)  # --out exists: kept as it was.
    self.assert_one_error(proc, r"report.json already exists; pass --overwrite")
    with open(out, "rb") as f:
      self.assertEqual(f.read(), before)

    write(data, lines[:2] + ['{"text": "(()x", "label": 0}'])
    proc = run_cli("launch.evaluate", *args, "--overwrite")
    self.assert_one_error(proc, r"data.jsonl line 3: character 'x'")
    with open(out, "rb") as f:
      self.assertEqual(f.read(), before)

  def assert_one_error(self, proc, pattern):
    line = cli_helpers.assert_one_line_error(self, proc, pattern)
    return line


class OutputPathTest(absltest.TestCase):
  """Bad --out paths fail before any model is loaded (no trained model here)."""

  def test_output_that_cannot_be_written_is_refused_first(self):
    tmp = self.create_tempdir().full_path
    data = f"{tmp}/d.jsonl"
    write(data, ['{"text": "()"}'])
    with open(f"{tmp}/afile", "w") as f:
      f.write("kept")
    for out, pattern in (
        (tmp, r"is a folder; name a file"),
        (f"{tmp}/afile/r.json", r"afile is a file, so"),
        (data, r"d.jsonl is also an input"),
    ):
      with self.assertRaisesRegex(UserError, pattern):
        evaluate.evaluate_jsonl(f"{tmp}/not_loaded", data, out, overwrite=True)
    with open(data) as f:
      self.assertEqual(f.read(), '{"text": "()"}\n')
    with open(f"{tmp}/afile") as f:
      self.assertEqual(f.read(), "kept")


if __name__ == "__main__":
  absltest.main()
