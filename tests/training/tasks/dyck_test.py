"""ut.training.tasks.dyck: the Dyck-1 generator against brute-force references,
the held-out keys, and the breakdown.

The references below are written here, independently of the module, straight
from the definitions. Measured numbers (balanced share, counting baseline) are
printed; run with `pytest -s` to see them.
"""

import doctest
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from ut.training.tasks import dyck

# ----------------------------------------------------------------- references


def reference_balanced(text):
  """Balanced iff deleting '()' pairs until none remain leaves nothing."""
  while "()" in text:
    text = text.replace("()", "")
  return text == ""


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


class ProtocolTest(absltest.TestCase):

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


if __name__ == "__main__":
  absltest.main()
