"""Zhong & Andreas's Dyck-1 protocol (ut.experiments.dyck_protocol): strings
seen in training, the counting report, the tables' breakdowns, and a
default-length model scored on every string of 1-60 brackets."""

import itertools
import json
import math
import os
import random
import tempfile

from absl.testing import absltest
import numpy as np

from configs import dyck as dyck_config
from tests import dyck_reference
from ut.experiments import dyck_protocol
from ut.training import data as data_lib
from ut.training import evaluate
from ut.training import held_out
from ut.training import train
from ut.training.tasks import dyck

# ------------------------------------------------------------------ protocol


class ProtocolTest(absltest.TestCase):

  def test_seen_in_training_counts_trained_strings(self):
    # A config whose held-out sets were drawn without the exclusion (as if the
    # stream ignored them) reports the share a plain set comparison finds.
    config = dyck_config.get_config("smoke,max_len=10")
    config.train.steps = 30
    task = data_lib.make_task(config)
    plain = data_lib.make_task(config)
    plain.exclude = None  # The stream now draws held-out strings too.
    trained = {
        t
        for step in range(config.train.steps)
        for t in dyck.decode(
            data_lib.train_batch(config, plain, step)["tokens"]
        )
    }
    want = {
        s: np.mean(
            [t in trained for t in dyck.decode(task.held_out(s)["tokens"])]
        )
        for s in ("valid", "test")
    }
    self.assertGreater(min(want.values()), 0)
    self.assertEqual(dyck_protocol.seen_in_training(config, plain), want)

  def test_counting_report_and_short_balanced_strings(self):
    config = dyck_config.get_config()
    report = dyck_protocol.counting_report(config)
    task = data_lib.make_task(config)
    texts = dyck.decode(task.held_out("test")["tokens"])
    labels = task.held_out("test")["labels"][:, -1]
    self.assertEqual(
        report["test"]["counting"]["accuracy"],
        dyck.counting_baseline_accuracy(texts, labels),
    )
    self.assertEqual(report["test"]["distinct"], len(set(texts)))
    short = {
        t
        for s in ("valid", "test")
        for t in dyck.decode(task.held_out(s)["tokens"])
        if len(t) <= 10 and dyck_reference.ref_balanced(t)
    }
    every_short = [
        t
        for n in range(2, 11, 2)
        for t in map("".join, itertools.product("()", repeat=n))
        if dyck_reference.ref_balanced(t)
    ]
    self.assertEqual(
        report["short_balanced"],
        dict(held_out=len(short), total=len(every_short)),
    )
    self.assertLen(every_short, 64)


class DefaultModelTest(absltest.TestCase):
  """A model at the default length scores every string of 1-60 brackets."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._tmp = tempfile.TemporaryDirectory()
    cls.workdir = os.path.join(cls._tmp.name, "run")
    cls.config = dyck_config.get_config("smoke,max_len=60")
    cls.config.train.steps = 2
    cls.final = train.train_and_evaluate(cls.config, cls.workdir)

  @classmethod
  def tearDownClass(cls):
    cls._tmp.cleanup()
    super().tearDownClass()

  def test_evaluate_scores_every_string_of_1_to_60_brackets(self):
    rng = random.Random(8)
    lines = []
    for length in range(1, 61):
      lines.append("".join(rng.choice("()") for _ in range(length)))
      if length % 2 == 0:
        half = length // 2
        lines.append("(" * half + ")" * half)  # Balanced.
        lines.append(")" * half + "(" * half)  # Equal counts, not.
        lines.append(dyck_reference.ref_grammar(half, rng))
    data = os.path.join(self.create_tempdir().full_path, "made_elsewhere.jsonl")
    with open(data, "w") as f:
      for i, text in enumerate(lines):
        obj = {"text": text}
        if i % 2:
          obj["label"] = int(dyck_reference.ref_balanced(text))
        f.write(json.dumps(obj) + "\n")
    report = evaluate.evaluate_jsonl(self.workdir, data)
    self.assertEqual(report["num_skipped_too_long"], 0)
    self.assertEqual(report["num_examples"], len(lines))
    self.assertEqual(report["num_scored_positions"], len(lines))
    self.assertEqual(report["position_table"], 61)
    self.assertEqual(report["num_labels_disagreeing_with_task"], 0)
    self.assertEqual(
        sorted(map(int, report["by_text_length"])), list(range(1, 61))
    )
    breakdown = report["breakdown"]
    self.assertEqual(breakdown["accuracy"], report["accuracy"])
    self.assertEqual(
        sum(b["num"] for b in breakdown["by_length"].values()), len(lines)
    )
    self.assertEqual(
        breakdown["by_subset"]["unbalanced_equal_counts"]["num"],
        sum(
            1
            for t in lines
            if not dyck_reference.ref_balanced(t)
            and t.count("(") == t.count(")")
        ),
    )

  def test_test_metrics_score_the_fixed_test_set(self):
    model = evaluate.load(self.workdir)
    got = held_out.test_metrics(
        model.params, model.spec, model.config, model.task
    )
    batch = model.task.held_out("test")
    preds = evaluate.predict_classes(model.params, model.spec, batch["tokens"])[
        :, -1
    ]
    labels = batch["labels"][:, -1]
    self.assertEqual(got["test_accuracy"], float(np.mean(preds == labels)))
    self.assertEqual(
        got["test_breakdown"]["model"]["accuracy"], got["test_accuracy"]
    )
    self.assertEqual(got, {k: self.final[k] for k in got})  # In metrics.json.
    self.assertTrue(math.isfinite(got["test_loss"]))
    # The validation set is what the loop scored.
    valid = held_out.held_out_metrics(
        model.params,
        model.spec,
        held_out.eval_batches(model.config, model.task),
    )
    self.assertEqual(valid["accuracy"], self.final["eval_accuracy"])
    report = dyck_protocol.workdir_report(self.workdir)
    self.assertEqual(report["test"]["model"]["accuracy"], got["test_accuracy"])
    self.assertEqual(report["test"]["num"], self.config.data.test_num)
    rows = dyck_protocol.breakdown_rows(
        {s: report[s]["model"] for s in ("valid", "test")}
    )
    self.assertEqual([r["part"] for r in rows][:2], ["all", "length 1-10"])


class TableBreakdownTest(absltest.TestCase):

  def test_seed_mean_of_breakdowns_equals_the_pooled_count(self):
    # On one test set every run's part has the same strings, so the mean of
    # the runs' accuracies is the pooled share of correct predictions.
    rng = np.random.default_rng(0)
    texts = [
        "".join(rng.choice(list("()"), n)) for n in rng.integers(1, 31, 300)
    ]
    labels = np.array([dyck.is_balanced(t) for t in texts], int)
    preds = [rng.integers(0, 2, len(texts)) for _ in range(3)]
    runs = [dyck.breakdown(texts, labels, p, 30) for p in preds]
    mean = dyck_protocol.mean_breakdown(runs)
    pooled = dyck.breakdown(
        texts * 3, np.tile(labels, 3), np.concatenate(preds), 30
    )
    self.assertAlmostEqual(mean["accuracy"], pooled["accuracy"])
    for key in ("by_length", "by_subset"):
      self.assertEqual(list(mean[key]), list(pooled[key]))
      for part, cell in mean[key].items():
        self.assertEqual(cell["num"] * 3, pooled[key][part]["num"])
        if cell["accuracy"] is None:
          self.assertIsNone(pooled[key][part]["accuracy"])
        else:
          self.assertAlmostEqual(
              cell["accuracy"], pooled[key][part]["accuracy"]
          )
    self.assertAlmostEqual(
        mean["short_balanced"]["accuracy"],
        pooled["short_balanced"]["accuracy"],
    )
    with self.assertRaisesRegex(ValueError, "different sets"):
      dyck_protocol.mean_breakdown([runs[0], dyck.breakdown(["()"], [1], [1])])

  def test_table_puts_counting_first_and_skips_runs_without_a_test(self):
    texts = ["()", "(("]
    b = dyck.breakdown(texts, [1, 0], [1, 1])
    counting = dyck.breakdown(texts, [1, 0], [1, 0])
    run = dict(test_breakdown=dict(model=b, counting=counting))
    tables = dyck_protocol.table_breakdowns(
        {("za", "sparse"): [run, run], ("za", "compiled"): [dict(agreement=1)]}
    )
    self.assertEqual(list(tables), ["za"])
    self.assertEqual(list(tables["za"]), ["counting", "sparse"])
    self.assertEqual(tables["za"]["counting"]["accuracy"], 1.0)
    self.assertEqual(tables["za"]["sparse"]["accuracy"], 0.5)


if __name__ == "__main__":
  absltest.main()
