"""Zhong & Andreas's Dyck-1 protocol: the `za` generator, the held-out sets,
the training stream that never draws them, the breakdown, and evaluation of a
default-length model on strings of 1-60 brackets.

The reference generator below is written here from the definition in
ut/training/tasks/dyck.py's docstring, one string at a time in plain Python
(recursion for the grammar), independently of the vectorised module.
"""

import collections
import itertools
import json
import math
import os
import random
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import stats

from configs import dyck as dyck_config
from configs import dyck_table
from configs import khop as khop_config
from ut.errors import UserError
from ut.experiments import dyck_protocol
from ut.training import data as data_lib
from ut.training import evaluate
from ut.training import held_out
from ut.training import train
from ut.training.tasks import dyck
from ut.training.tasks import dyck_mixes

# A chi-square statistic this far out (p < 1e-6) fails a test.
P_FAIL = 1e-6


# ----------------------------------------------------------------- reference


def ref_balanced(text):
  while "()" in text:
    text = text.replace("()", "")
  return not text


def ref_grammar(t, r):
  if t == 1:
    return "()"
  if r.random() < 0.5:
    return "(" + ref_grammar(t - 1, r) + ")"
  u = r.randint(1, t - 1)
  return ref_grammar(u, r) + ref_grammar(t - u, r)


def ref_geometric(r, p):
  n = 1
  while r.random() >= p:
    n += 1
  return n


def ref_za(r, max_len, p=dyck_mixes.ZA_GEOMETRIC_P):
  """One string of the 'za' mix, step by step as the definition reads."""
  if r.random() < 1 / 3:
    return "".join(r.choice("()") for _ in range(r.randint(1, max_len)))
  s = list(ref_grammar(r.randint(1, max_len // 2), r))
  if r.random() < 0.5:
    return "".join(s)
  code = r.randrange(4)
  if code & 1:
    for _ in range(ref_geometric(r, p)):
      i, j = r.randrange(len(s)), r.randrange(len(s))
      s[i], s[j] = s[j], s[i]
  if code & 2:
    flips = ref_geometric(r, p) * (2 if r.random() < 2 / 3 else 1)
    for _ in range(flips):
      i = r.randrange(len(s))
      s[i] = "(" if s[i] == ")" else ")"
  return "".join(s)


def exact_grammar(t):
  """{word: probability} of the grammar's B(t), by its recursion."""
  if t == 1:
    return {"()": 1.0}
  out = collections.defaultdict(float)
  for w, p in exact_grammar(t - 1).items():
    out["(" + w + ")"] += 0.5 * p
  for u in range(1, t):
    for (a, pa), (b, pb) in itertools.product(
        exact_grammar(u).items(), exact_grammar(t - u).items()
    ):
      out[a + b] += 0.5 / (t - 1) * pa * pb
  return dict(out)


def two_sample_p(a_counts, b_counts):
  """p-value of a chi-square test that two samples come from one law."""
  cats = sorted(set(a_counts) | set(b_counts))
  a = np.array([a_counts.get(c, 0) for c in cats], float)
  b = np.array([b_counts.get(c, 0) for c in cats], float)
  k1, k2 = np.sqrt(b.sum() / a.sum()), np.sqrt(a.sum() / b.sum())
  chi2 = float(((k1 * a - k2 * b) ** 2 / (a + b)).sum())
  return stats.chi2.sf(chi2, len(cats) - 1)


# ------------------------------------------------------------------ generator


class ZaGeneratorTest(parameterized.TestCase):

  def test_grammar_matches_its_exact_law(self):
    # 42 words of 5 pairs, their probabilities from the recursion itself.
    law = exact_grammar(5)
    self.assertLen(law, 42)
    self.assertAlmostEqual(sum(law.values()), 1.0)
    num = 60000
    open_BxL = dyck_mixes._grammar_words(
        np.random.default_rng(0), np.full(num, 5), 10
    )
    texts = ["".join("(" if o else ")" for o in row) for row in open_BxL]
    counts = collections.Counter(texts)
    self.assertTrue(set(counts) <= set(law), set(counts) - set(law))
    words = sorted(law)
    observed = np.array([counts[w] for w in words])
    expected = num * np.array([law[w] for w in words])
    self.assertGreater(stats.chisquare(observed, expected).pvalue, P_FAIL)

  def test_grammar_rows_of_mixed_sizes_are_right_aligned(self):
    pairs = np.array([1, 3, 2, 5])
    open_BxL = dyck_mixes._grammar_words(np.random.default_rng(1), pairs, 10)
    for row, t in zip(open_BxL, pairs):
      self.assertFalse(row[: 10 - 2 * t].any())
      word = "".join("(" if o else ")" for o in row[10 - 2 * t :])
      self.assertIn(word, exact_grammar(t))

  @parameterized.named_parameters(
      ("plain", ()), ("held_out", ("()", ")(", "(())"))
  )
  def test_za_mix_matches_the_reference_generator(self, held_out):
    # Every string of at most 6 brackets, with its frequency: one law. With
    # held-out strings, the reference redraws them as the definition says.
    max_len, rng = 6, random.Random(0)
    exclude = dyck.key_set(dyck.encode(held_out, max_len)) if held_out else None
    ref = []
    while len(ref) < 60000:
      text = ref_za(rng, max_len)
      if text not in held_out:
        ref.append(text)
    _, labels, texts = dyck.generate(
        200000, max_len, "za", seed=1, exclude=exclude
    )
    self.assertFalse(set(texts) & set(held_out))
    self.assertGreater(
        two_sample_p(collections.Counter(texts), collections.Counter(ref)),
        P_FAIL,
    )
    for text, label in zip(texts[:2000], labels):
      self.assertEqual(bool(label), ref_balanced(text), text)

  def test_the_reference_comparison_sees_a_different_mutation_rate(self):
    # The comparison above can fail: fewer mutations (p = 1) or more (p = 0.5)
    # than the generator's p are told apart on the same sample sizes.
    _, _, texts = dyck.generate(200000, 6, "za", seed=1)
    for p in (1.0, 0.5):
      rng = random.Random(0)
      ref = collections.Counter(ref_za(rng, 6, p) for _ in range(60000))
      self.assertLess(two_sample_p(collections.Counter(texts), ref), P_FAIL, p)

  def test_statistics_of_zhong_and_andreas(self):
    # Their figures for the mix, within the precision they are stated to
    # (half a unit of the last digit) plus 4 standard errors of this sample.
    num = 400000
    tokens, labels = dyck.generate_tokens(num, 60, "za", seed=2)
    opens = (tokens == dyck.OPEN).sum(1)
    closes = (tokens == dyck.CLOSE).sum(1)
    length, equal, balanced = opens + closes, opens == closes, labels == 1
    unbalanced = ~balanced
    # Each statistic: (value, its standard error, stated figure, precision).
    share = lambda x: (x.mean(), np.sqrt(x.mean() * (1 - x.mean()) / len(x)))
    checks = {
        "balanced": (*share(balanced), 0.525, 0.0005),
        "mean length": (length.mean(), length.std() / np.sqrt(num), 31, 0.5),
        "counting accuracy": (*share(equal == balanced), 0.93, 0.005),
        "equal counts among unbalanced": (
            *share(equal[unbalanced]),
            0.15,
            0.005,
        ),
    }
    for name, (value, se, stated, precision) in checks.items():
      print(f"za at max_len 60: {name} {value:.4f} (stated {stated})")
      self.assertLessEqual(abs(value - stated), precision + 4 * se, name)
    self.assertEqual((length.min(), length.max()), (1, 60))
    # The lengths: uniform 1..60 (1/3) and even 2..60 (2/3): mean 30.83.
    self.assertAlmostEqual(
        float(length.mean()),
        30.5 / 3 + 2 * 31 / 3,
        delta=4 * length.std() / np.sqrt(num),
    )

  @parameterized.parameters(*dyck.MIXES)
  def test_lengths_at_the_default_max_len(self, mix):
    tokens, labels, texts = dyck.generate(20000, 60, mix, seed=3)
    lengths = {len(t) for t in texts}
    want = set(range(1, 61)) if mix != "hard" else set(range(2, 61, 2))
    self.assertEqual(lengths, want)
    self.assertEqual(tokens.shape, (20000, 61))
    self.assertEqual(dyck.decode(tokens[:500]), texts[:500])
    for text, label in zip(texts[:3000], labels):
      self.assertEqual(bool(label), ref_balanced(text), text)

  def test_hard_mix_keeps_counting_at_half_with_held_out_strings(self):
    exclude = dyck.key_set(
        dyck.encode(["()", ")(", "(())", "()()", "))(("], 60)
    )
    tokens, labels, texts = dyck.generate(
        1001, 60, "hard", seed=4, exclude=exclude
    )
    self.assertEqual(int(labels.sum()), 500)
    self.assertFalse({"()", ")(", "(())", "()()", "))(("} & set(texts))
    self.assertEqual(dyck.counting_baseline_accuracy(texts, labels), 500 / 1001)
    for text, label in zip(texts, labels):
      self.assertEqual(bool(label), ref_balanced(text), text)


class HeldOutKeysTest(parameterized.TestCase):

  def test_keys_are_equal_exactly_for_equal_strings(self):
    texts = [
        "".join(c) for n in range(7) for c in itertools.product("()", repeat=n)
    ]
    keys = dyck.keys(dyck.encode(texts, 8))
    self.assertLen(set(k.tobytes() for k in keys), len(texts))
    again = dyck.keys(dyck.encode(texts[::-1], 8))[::-1]
    np.testing.assert_array_equal(keys, again)

  def test_contains(self):
    held = dyck.key_set(dyck.encode(["()", "(", "(())"], 6))
    query = dyck.keys(dyck.encode(["", "()", ")(", "(())", "((((((", "("], 6))
    np.testing.assert_array_equal(
        dyck.contains(held, query), [False, True, False, True, False, True]
    )
    with self.assertRaisesRegex(ValueError, r"differ in width"):
      dyck.contains(held, dyck.keys(dyck.encode(["()"], 60)))

  @parameterized.parameters(*dyck.MIXES)
  def test_only_excluded_rows_are_redrawn(self, mix):
    free_tokens, _ = dyck.generate_tokens(3000, 8, mix, seed=5)
    exclude = dyck.key_set(free_tokens[:200])
    tokens, labels = dyck.generate_tokens(3000, 8, mix, seed=5, exclude=exclude)
    hit = dyck.contains(exclude, dyck.keys(free_tokens))
    self.assertGreater(hit.sum(), 200)  # Short strings repeat.
    np.testing.assert_array_equal(tokens[~hit], free_tokens[~hit])
    self.assertFalse(dyck.contains(exclude, dyck.keys(tokens)).any())
    again = dyck.generate_tokens(3000, 8, mix, seed=5, exclude=exclude)
    np.testing.assert_array_equal(again[0], tokens)
    np.testing.assert_array_equal(labels, dyck.labels_of(tokens))

  def test_excluding_every_string_is_an_error(self):
    every = [
        "".join(c)
        for n in range(1, 3)
        for c in itertools.product("()", repeat=n)
    ]
    with self.assertRaisesRegex(ValueError, r"held-out sets hold almost every"):
      dyck.generate(
          4, 2, "za", seed=0, exclude=dyck.key_set(dyck.encode(every, 2))
      )


# ------------------------------------------------------------------ protocol


class ProtocolTest(absltest.TestCase):

  def test_config_defaults_are_the_protocol(self):
    config = dyck_config.get_config()
    self.assertEqual((config.data.mix, config.data.max_len), ("za", 60))
    self.assertEqual(
        (config.data.test_num, config.data.valid_num), (4000, 4000)
    )
    self.assertEqual(config.eval.num, config.data.valid_num)
    smoke = dyck_config.get_config("smoke")
    self.assertLessEqual(smoke.data.test_num + smoke.data.valid_num, 64)
    self.assertEqual(
        dyck_config.get_config("smoke,max_len=60").data.max_len, 60
    )
    added = []
    dyck_table.sweep(lambda arg, **kw: added.append(arg), "smoke")
    self.assertNotEmpty(added)
    for arg in added:  # The table's runs are this protocol too.
      self.assertGreater(dyck_table.get_config(arg).data.test_num, 0)

  def test_held_out_sets_do_not_depend_on_the_run_seed(self):
    tasks = [
        data_lib.make_task(dyck_config.get_config(f"seed={s}")) for s in (0, 1)
    ]
    for split, num in (("valid", 4000), ("test", 4000)):
      a, b = (t.held_out(split) for t in tasks)
      self.assertEqual(a["tokens"].shape, (num, 61))
      np.testing.assert_array_equal(a["tokens"], b["tokens"])
      np.testing.assert_array_equal(
          a["labels"][:, -1],
          [ref_balanced(t) for t in dyck.decode(a["tokens"])],
      )
    valid, test = (tasks[0].held_out(s)["tokens"] for s in ("valid", "test"))
    self.assertFalse(np.array_equal(valid, test))  # Separate seeds.

  def test_training_stream_never_draws_a_held_out_string(self):
    config = dyck_config.get_config("seed=3")
    config.train.steps = 200
    task = data_lib.make_task(config)
    held = {
        split: set(dyck.decode(task.held_out(split)["tokens"]))
        for split in ("valid", "test")
    }
    trained = set()
    for step in range(config.train.steps):
      batch = data_lib.train_batch(config, task, step)
      trained |= set(dyck.decode(batch["tokens"]))
      np.testing.assert_array_equal(
          batch["labels"][:, -1],
          [ref_balanced(t) for t in dyck.decode(batch["tokens"])],
      )
    self.assertFalse(trained & (held["valid"] | held["test"]))
    # Without the exclusion such strings come up: the check can fail.
    free = set(dyck.generate(config.train.steps * 128, 60, "za", seed=0)[2])
    self.assertGreater(len(free & held["test"]), 100)
    self.assertEqual(
        dyck_protocol.seen_in_training(config, task),
        {"valid": 0.0, "test": 0.0},
    )
    # Deterministic: the same (seed, step), the same batch.
    np.testing.assert_array_equal(
        data_lib.train_batch(config, task, 7)["tokens"],
        data_lib.train_batch(config, task, 7)["tokens"],
    )

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

  def test_eval_batches_are_the_fixed_sets(self):
    config = dyck_config.get_config("smoke")
    task = data_lib.make_task(config)
    for split in ("valid", "test"):
      batches = held_out.eval_batches(config, task, split)
      self.assertTrue(
          all(len(b["tokens"]) <= config.eval.batch_size for b in batches)
      )
      np.testing.assert_array_equal(
          np.concatenate([b["tokens"] for b in batches]),
          task.held_out(split)["tokens"],
      )
    np.testing.assert_array_equal(
        held_out.eval_batches(config, task)[0]["tokens"],
        held_out.eval_batches(config, task, "valid")[0]["tokens"],
    )
    khop = khop_config.get_config("smoke")
    khop_task = data_lib.make_task(khop)
    # k-hop has no fixed sets: streams (seed, 1) and (seed, 2), of eval.num.
    valid, test = (
        np.concatenate(
            [b["tokens"] for b in held_out.eval_batches(khop, khop_task, s)]
        )
        for s in ("valid", "test")
    )
    self.assertLen(valid, khop.eval.num)
    np.testing.assert_array_equal(
        test,
        khop_task.batch(khop.eval.num, data_lib.stream_seed(khop.seed, 2))[
            "tokens"
        ],
    )
    self.assertFalse(np.array_equal(valid, test))
    with self.assertRaisesRegex(UserError, r"held-out split 'train'"):
      held_out.eval_batches(khop, khop_task, "train")

  def test_bad_held_out_settings_are_user_errors(self):
    for field, value in (("test_num", -1), ("valid_seed", -2)):
      config = dyck_config.get_config("smoke")
      config.data[field] = value
      with self.assertRaisesRegex(UserError, rf"config.data.{field}="):
        data_lib.make_task(config)
    config = dyck_config.get_config("smoke,max_len=2")
    config.data.test_num = 4000
    with self.assertRaisesRegex(UserError, r"held-out sets hold almost every"):
      data_lib.make_task(config)

  def test_breakdown_on_a_hand_made_set(self):
    texts = ["()", ")(", "(", "(())", "()" * 10, ")(" * 15, "(" * 25, "()" * 30]
    labels = [1, 0, 0, 1, 1, 0, 0, 1]
    preds = [1, 1, 0, 0, 1, 0, 1, 1]
    got = dyck.breakdown(texts, labels, preds, max_len=60)
    self.assertEqual(got["num"], 8)
    self.assertEqual(got["accuracy"], 5 / 8)
    self.assertEqual(
        list(got["by_length"]),
        ["1-10", "11-20", "21-30", "31-40", "41-50", "51-60"],
    )
    self.assertEqual(got["by_length"]["1-10"], dict(num=4, accuracy=0.5))
    self.assertEqual(got["by_length"]["11-20"], dict(num=1, accuracy=1.0))
    self.assertEqual(got["by_length"]["21-30"], dict(num=2, accuracy=0.5))
    self.assertEqual(got["by_length"]["31-40"], dict(num=0, accuracy=None))
    self.assertEqual(got["by_length"]["51-60"], dict(num=1, accuracy=1.0))
    self.assertEqual(
        got["by_subset"],
        dict(
            balanced=dict(num=4, accuracy=0.75),
            unbalanced_unequal_counts=dict(num=2, accuracy=0.5),
            unbalanced_equal_counts=dict(num=2, accuracy=0.5),
        ),
    )
    self.assertEqual(got["short_balanced"], dict(num=2, accuracy=0.5))
    counting = dyck.breakdown(texts, labels, dyck.counting_baseline(texts))
    self.assertEqual(
        counting["by_subset"]["unbalanced_equal_counts"]["accuracy"], 0
    )
    self.assertEqual(
        list(counting["by_length"])[-1], "51-60"
    )  # The longest text.

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
        if len(t) <= 10 and ref_balanced(t)
    }
    every_short = [
        t
        for n in range(2, 11, 2)
        for t in map("".join, itertools.product("()", repeat=n))
        if ref_balanced(t)
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
        lines.append(ref_grammar(half, rng))
    data = os.path.join(self.create_tempdir().full_path, "made_elsewhere.jsonl")
    with open(data, "w") as f:
      for i, text in enumerate(lines):
        obj = {"text": text}
        if i % 2:
          obj["label"] = int(ref_balanced(text))
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
            if not ref_balanced(t) and t.count("(") == t.count(")")
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
