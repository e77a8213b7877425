"""Tests for ut.training.tasks: Dyck-1 and k-hop generators against brute-force references.

The references below are written here, independently of the modules, straight
from the definitions. Measured numbers (balanced share, counting baseline,
letter-label share) are printed; run with `pytest -s` to see them.
"""

import doctest
import itertools
import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest

from configs import dyck as dyck_config
from configs import khop as khop_config
from tests import cli_helpers
from ut.errors import UserError
from ut.training import data as data_lib
from ut.training.tasks import dyck
from ut.training.tasks import GENERATORS
from ut.training.tasks import khop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------- references


def reference_balanced(text):
  """Balanced iff deleting '()' pairs until none remain leaves nothing."""
  while "()" in text:
    text = text.replace("()", "")
  return text == ""


def reference_hop(x, k, null):
  """hop_k by the definition: walk back to the last equal letter, step right."""
  out = []
  for i in range(len(x)):
    position, defined = i, True
    for _ in range(k):
      j = position - 1
      while j >= 0 and x[j] != x[position]:
        j -= 1
      if j < 0:
        defined = False
        break
      position = j + 1
    out.append(x[position] if defined else null)
  return out


# ----------------------------------------------------------------------- Dyck


class DyckTest(parameterized.TestCase):

  def test_is_balanced_matches_reference_on_all_short_strings(self):
    count = 0
    for length in range(9):
      for chars in itertools.product("()", repeat=length):
        text = "".join(chars)
        self.assertEqual(dyck.is_balanced(text), reference_balanced(text), text)
        count += 1
    self.assertEqual(count, 2**9 - 1)

  def test_encode_layout_and_decode_round_trip(self):
    texts = ["", "()", ")(", "(()))(", "(((("]
    tokens = dyck.encode(texts, max_len=6)
    self.assertEqual(tokens.shape, (5, 7))
    self.assertEqual(tokens.dtype, np.int32)
    np.testing.assert_array_equal(tokens[:, -1], dyck.QUERY)
    np.testing.assert_array_equal(tokens[1], [0, 0, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(tokens[4], [0, 0, 1, 1, 1, 1, 3])
    self.assertEqual(dyck.decode(tokens), texts)

  def test_encode_rejects_bad_character_naming_it(self):
    with self.assertRaisesRegex(
        ValueError, r"text 1: character 'x' at position 2"
    ):
      dyck.encode(["()", "()x"], max_len=4)

  def test_encode_rejects_too_long_text(self):
    with self.assertRaisesRegex(ValueError, r"length 6.*max_len=4"):
      dyck.encode(["()()()"], max_len=4)

  @parameterized.parameters(*dyck.MIXES)
  def test_generate_labels_match_reference(self, mix):
    max_len = 12
    tokens, labels, texts = dyck.generate(600, max_len, mix, seed=3)
    self.assertEqual(tokens.shape, (600, max_len + 1))
    self.assertEqual(tokens.dtype, np.int32)
    self.assertEqual(labels.shape, (600,))
    self.assertEqual(labels.dtype, np.int32)
    self.assertEqual(dyck.decode(tokens), texts)
    np.testing.assert_array_equal(tokens[:, -1], dyck.QUERY)
    for text, label in zip(texts, labels):
      self.assertBetween(len(text), 1 if mix != "hard" else 2, max_len)
      self.assertEqual(bool(label), reference_balanced(text), text)
    # Every length in range is used, for random and grammar strings alike.
    self.assertLen(
        {len(t) for t in texts}, max_len if mix != "hard" else max_len // 2
    )

  @parameterized.parameters(*dyck.MIXES)
  def test_generate_is_deterministic(self, mix):
    a = dyck.generate(50, 10, mix, seed=7)
    b = dyck.generate(50, 10, mix, seed=7)
    c = dyck.generate(50, 10, mix, seed=8)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    self.assertEqual(a[2], b[2])
    self.assertNotEqual(a[2], c[2])

  @parameterized.parameters(200, 201)
  def test_hard_mix_defeats_counting(self, num):
    tokens, labels, texts = dyck.generate(num, 32, "hard", seed=1)
    self.assertEqual(int(labels.sum()), num // 2)
    negatives = [t for t, l in zip(texts, labels) if not l]
    self.assertLen(negatives, num - num // 2)
    for text in texts:
      self.assertEqual(text.count("("), text.count(")"), text)
    accuracy = dyck.counting_baseline_accuracy(texts, labels)
    self.assertEqual(accuracy, (num // 2) / num)
    # Positives and negatives are interleaved, not in two blocks.
    self.assertGreater(int(np.sum(labels[1:] != labels[:-1])), num // 4)

  def test_hard_mix_strings_are_uniform(self):
    # Length 6: 5 Dyck words and 15 unbalanced strings with equal counts,
    # enumerated here; each should come up about equally often.
    all_strings = ["".join(c) for c in itertools.product("()", repeat=6)]
    words = [t for t in all_strings if reference_balanced(t)]
    negatives = [
        t
        for t in all_strings
        if t.count("(") == 3 and not reference_balanced(t)
    ]
    self.assertEqual((len(words), len(negatives)), (5, 15))
    _, _, texts = dyck.generate(30000, 6, "hard", seed=2)
    for population in (words, negatives):
      counts = np.array([texts.count(t) for t in population])
      expected = counts.sum() / len(population)
      chi2 = float(((counts - expected) ** 2 / expected).sum())
      df = len(population) - 1  # A chi-square this far out: p < 1e-6.
      self.assertLess(chi2, df + 8 * np.sqrt(2 * df), counts)

  def test_za_mix_balance_and_counting_baseline(self):
    _, labels, texts = dyck.generate(6000, 32, "za", seed=0)
    balanced = float(labels.mean())
    counting = dyck.counting_baseline_accuracy(texts, labels)
    reference_counting = np.mean(
        [
            (t.count("(") == t.count(")")) == bool(l)
            for t, l in zip(texts, labels)
        ]
    )
    print(
        f"dyck 'za' max_len=32: balanced {balanced:.3f}, "
        f"counting baseline {counting:.3f}"
    )
    self.assertAlmostEqual(counting, reference_counting)
    self.assertBetween(balanced, 0.45, 0.58)  # DESIGN: about 52%.
    self.assertBetween(counting, 0.88, 0.995)  # DESIGN: about 93%.

  def test_counting_baseline(self):
    np.testing.assert_array_equal(
        dyck.counting_baseline(["()", ")(", "(", "(()())", ""]), [1, 1, 0, 1, 1]
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, r"'za', 'za_exact', 'hard'"):
      dyck.generate(4, 8, "easy", seed=0)
    with self.assertRaisesRegex(ValueError, r"max_len >= 2"):
      dyck.generate(4, 1, "za", seed=0)

  def test_doctests(self):
    result = doctest.testmod(dyck)
    self.assertGreater(result.attempted, 0)
    self.assertEqual(result.failed, 0)


# ---------------------------------------------------------------------- k-hop


class KHopTest(parameterized.TestCase):

  def test_hop_and_hop_batch_match_reference(self):
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
      alphabet = int(rng.integers(2, 6))
      n = int(rng.integers(1, 13))
      x = rng.integers(alphabet, size=(5, n))  # Repeats and equal neighbours.
      for k in range(1, 5):
        batch = khop.hop_batch(x, k, alphabet=alphabet)
        self.assertEqual(batch.shape, (5, n))
        for row, labels in zip(x, batch):
          expected = reference_hop(list(row), k, null=alphabet)
          np.testing.assert_array_equal(
              khop.hop(row, k, alphabet=alphabet), expected
          )
          np.testing.assert_array_equal(labels, expected)
          checked += 1
      ks = rng.integers(1, 5, size=5)
      mixed = khop.hop_batch(x, ks, alphabet=alphabet)
      for row, k, labels in zip(x, ks, mixed):
        np.testing.assert_array_equal(
            labels, reference_hop(list(row), int(k), null=alphabet)
        )
    self.assertEqual(checked, 300 * 4 * 5)

  def test_hop_is_not_trivial(self):
    # abcabc, k=1: the letter after the previous copy. k=2 at position 5:
    # 'c' (last at 2) -> 3 'a' (last at 0) -> 1, reading 'b'.
    x = [0, 1, 2, 0, 1, 2]
    np.testing.assert_array_equal(
        khop.hop(x, 1, alphabet=3), [3, 3, 3, 1, 2, 0]
    )
    np.testing.assert_array_equal(
        khop.hop(x, 2, alphabet=3), [3, 3, 3, 3, 3, 1]
    )
    # ababa, k=2 at position 3: 'b' -> 2 'a' -> 1, reading 'b'; at 4: 'a' ->
    # 3 'b' -> 2, reading 'a'.
    x = [0, 1, 0, 1, 0]
    np.testing.assert_array_equal(khop.hop(x, 2, alphabet=2), [2, 2, 2, 1, 0])

  @parameterized.parameters((2, 1), (3, 2), (4, 3), (26, 4))
  def test_generate_fixed_k(self, alphabet, k):
    tokens, labels, ks = khop.generate(64, 40, alphabet, k, seed=5)
    self.assertEqual(tokens.shape, (64, 40))
    self.assertEqual(labels.shape, (64, 40))
    self.assertEqual(tokens.dtype, np.int32)
    self.assertEqual(labels.dtype, np.int32)
    np.testing.assert_array_equal(ks, k)
    self.assertTrue(np.all((tokens >= 0) & (tokens < alphabet)))
    self.assertFalse(np.any(tokens[:, 1:] == tokens[:, :-1]))
    for row, label in zip(tokens, labels):
      np.testing.assert_array_equal(
          label, reference_hop(list(row), k, null=alphabet)
      )

  def test_generate_k_range_hop_token_layout(self):
    alphabet, length = 4, 30
    tokens, labels, ks = khop.generate(
        400, length, alphabet, (2, 5), seed=9, k_max=8
    )
    self.assertEqual(tokens.shape, (400, length + 1))
    self.assertEqual(set(ks.tolist()), {2, 3, 4, 5})
    np.testing.assert_array_equal(tokens[:, 0], alphabet + 1 + (ks - 1))
    np.testing.assert_array_equal(labels[:, 0], khop.IGNORE)
    self.assertLess(int(tokens.max()), khop.vocab_size(alphabet, 8))
    self.assertFalse(np.any(tokens[:, 2:] == tokens[:, 1:-1]))
    for row, label, k in zip(tokens, labels, ks):
      np.testing.assert_array_equal(
          label[1:], reference_hop(list(row[1:]), int(k), null=alphabet)
      )

  def test_generate_is_deterministic(self):
    a = khop.generate(20, 25, 4, (1, 3), seed=11)
    b = khop.generate(20, 25, 4, (1, 3), seed=11)
    c = khop.generate(20, 25, 4, (1, 3), seed=12)
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)
    self.assertFalse(np.array_equal(a[0], c[0]))

  def test_neighbours_are_uniform_over_other_letters(self):
    tokens, _, _ = khop.generate(2000, 50, 4, 1, seed=2)
    pairs = np.zeros((4, 4))
    np.add.at(pairs, (tokens[:, :-1], tokens[:, 1:]), 1)
    np.testing.assert_array_equal(np.diag(pairs), 0)
    off = pairs[~np.eye(4, dtype=bool)] / pairs.sum()
    np.testing.assert_allclose(off, 1 / 12, rtol=0.05)

  def test_letter_label_share_falls_with_k(self):
    shares = []
    for k in range(1, 5):
      _, labels, _ = khop.generate(300, 100, 4, k, seed=k)
      shares.append(float(np.mean(labels < 4)))
    print(
        "khop length=100 alphabet=4 letter-label share for k=1..4: "
        + ", ".join(f"{s:.3f}" for s in shares)
    )
    self.assertTrue(all(a > b for a, b in zip(shares, shares[1:])), shares)
    self.assertGreater(shares[-1], 0.5)

  def test_encode_and_labels_round_trip(self):
    text = "abcab"
    x = khop.encode(text, None, alphabet=3)
    np.testing.assert_array_equal(x, [0, 1, 2, 0, 1])
    label = khop.decode_label(khop.hop(x, 1, alphabet=3), alphabet=3)
    self.assertEqual(label, "___bc")
    np.testing.assert_array_equal(
        khop.encode_label(label, alphabet=3), [3, 3, 3, 1, 2]
    )
    with_token = khop.encode(text, 3, alphabet=3, k_range=(1, 4))
    np.testing.assert_array_equal(with_token, [3 + 3, 0, 1, 2, 0, 1])
    labels = khop.encode_label(label, alphabet=3, k_range=(1, 4))
    self.assertEqual(khop.decode_label(labels, alphabet=3), label)
    # Equal neighbours in user text are allowed and follow the definition.
    x = khop.encode("aab", None, alphabet=2)
    np.testing.assert_array_equal(
        khop.hop(x, 1, alphabet=2), reference_hop([0, 0, 1], 1, null=2)
    )

  def test_encode_rejects_characters_outside_alphabet(self):
    with self.assertRaisesRegex(ValueError, r"'d' at position 3"):
      khop.encode("abcd", None, alphabet=3)
    with self.assertRaisesRegex(ValueError, r"'c' at position 0"):
      khop.encode_label("c_", alphabet=2)

  def test_accuracy_scores_letter_positions_only(self):
    labels = np.array([[khop.IGNORE, 4, 0, 1], [2, 3, 4, 4]])
    pred = np.array([[0, 0, 0, 2], [2, 3, 1, 1]])
    # Letter positions: (0,2) right, (0,3) wrong, (1,0) right, (1,1) right.
    self.assertEqual(khop.accuracy(pred, labels, alphabet=4), 0.75)

  @parameterized.named_parameters(
      ("alphabet_small", dict(num=2, length=5, alphabet=1, k=1), "alphabet"),
      ("alphabet_large", dict(num=2, length=5, alphabet=27, k=1), "alphabet"),
      ("k_zero", dict(num=2, length=5, alphabet=4, k=0), "k >= 1"),
      ("length", dict(num=2, length=1, alphabet=4, k=1), "length >= 2"),
      ("empty_range", dict(num=2, length=5, alphabet=4, k=(3, 2)), "k_min"),
      (
          "past_k_max",
          dict(num=2, length=5, alphabet=4, k=(1, 5), k_max=4),
          "k_max >= 5",
      ),
  )
  def test_bad_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      khop.generate(seed=0, **kwargs)

  def test_doctests(self):
    result = doctest.testmod(khop)
    self.assertGreater(result.attempted, 0)
    self.assertEqual(result.failed, 0)


class RegistryTest(absltest.TestCase):

  def test_tasks_registry(self):
    self.assertIs(GENERATORS["dyck"], dyck)
    self.assertIs(GENERATORS["khop"], khop)


class MakeTaskTest(parameterized.TestCase):

  @parameterized.parameters(
      (dyck_config, "max_len=1", r"max_len=1 is too short"),
      (khop_config, "k=0", r"k=0 is too small"),
      (khop_config, "alphabet=1", r"alphabet=1 is out of range"),
      (khop_config, "length=1", r"length=1 is too short"),
  )
  def test_settings_that_cannot_work_are_user_errors(
      self, module, arg, pattern
  ):
    # A UserError (one line from the CLIs), raised before a workdir is made.
    for smoke in ("", ",smoke"):  # smoke keeps an explicit length.
      config = module.get_config(arg + smoke)
      with self.assertRaisesRegex(
          UserError, r"config.data of task \w+: " + pattern
      ):
        data_lib.make_task(config)


@pytest.mark.slow
class DyckBaselineTest(absltest.TestCase):
  """launch.dyck_baseline, run as a command."""

  def run_baseline(self, workdir, *flags):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.dyck_baseline",
            f"--workdir={workdir}",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

  def test_counts_match_the_strings_themselves(self):
    workdir = self.create_tempdir().full_path
    proc = self.run_baseline(workdir, "--seeds=1", "--steps=200")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(workdir, "counting_baseline.json")) as f:
      mixes = json.load(f)["mixes"]
    self.assertEqual(list(mixes), list(dyck.MIXES))
    for mix, report in mixes.items():
      # From the strings themselves (the command compares token rows).
      config = dyck_config.get_config(f"mix={mix},seed=0")
      task = data_lib.make_task(config)
      trained = {
          t
          for step in range(config.train.steps)
          for t in dyck.decode(
              data_lib.train_batch(config, task, step)["tokens"]
          )
      }
      self.assertEqual(
          report["seen_in_training"], {"0": {"valid": 0, "test": 0}}
      )
      for split in ("valid", "test"):
        batch = task.held_out(split)
        held_out, labels = dyck.decode(batch["tokens"]), batch["labels"][:, -1]
        self.assertFalse(trained & set(held_out))
        self.assertAlmostEqual(report[split]["balanced"], labels.mean())
        counts = np.array([t.count("(") == t.count(")") for t in held_out])
        self.assertAlmostEqual(
            report[split]["counting"]["accuracy"], np.mean(counts == labels)
        )

  def test_no_seeds_is_one_line_error(self):
    workdir = os.path.join(self.create_tempdir().full_path, "out")
    cli_helpers.assert_one_line_error(
        self,
        self.run_baseline(workdir, "--seeds=0"),
        r"--seeds=0; use 1 or more",
    )
    self.assertFalse(os.path.exists(workdir))


if __name__ == "__main__":
  absltest.main()
