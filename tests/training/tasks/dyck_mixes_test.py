"""ut.training.tasks.dyck_mixes: Zhong & Andreas's `za` generator against a
reference written from its definition, and `za_exact` against their code.

The reference generator (tests/dyck_reference.py) is written from the
definition in ut/training/tasks/dyck.py's docstring, one string at a time in
plain Python (recursion for the grammar), independently of the vectorised
module. `za_exact` is checked against their code's statistics and exact laws.
"""

import collections
import hashlib
import random
import time

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import stats

from configs import dyck as dyck_config
from tests import dyck_reference
from ut.training import data
from ut.training.tasks import dyck
from ut.training.tasks import dyck_mixes

# Their code's figures (200k strings, max_len 60), as printed: to 0.1%.
THEIRS_NUM = 200000
THEIRS = {
    "equal counts among unbalanced": 0.146,
    "|#open - #close| = 2 among unbalanced": 0.176,
    "|#open - #close| = 4 among unbalanced": 0.195,
    "balanced": 0.525,
    "mean length": 30.8,
    "counting accuracy": 0.931,
}
ROUNDING = {name: 0.0005 for name in THEIRS} | {"mean length": 0.05}
NUM = 100000
Z = 4  # Standard errors allowed.


def statistics(mix, num, seed):
  """name -> (value, standard error of this sample, of theirs) at L = 60."""
  tokens, labels = dyck.generate_tokens(num, 60, mix, seed=seed)
  opens = (tokens == dyck.OPEN).sum(1)
  closes = (tokens == dyck.CLOSE).sum(1)
  gap, balanced = np.abs(opens - closes), labels == 1
  unbalanced = gap[~balanced]
  n_unbalanced = THEIRS_NUM * (1 - THEIRS["balanced"])

  def share(x, n_theirs):
    p = x.mean()
    return p, np.sqrt(p * (1 - p) / len(x)), np.sqrt(p * (1 - p) / n_theirs)

  length = opens + closes
  return {
      "equal counts among unbalanced": share(unbalanced == 0, n_unbalanced),
      "|#open - #close| = 2 among unbalanced": share(
          unbalanced == 2, n_unbalanced
      ),
      "|#open - #close| = 4 among unbalanced": share(
          unbalanced == 4, n_unbalanced
      ),
      "balanced": share(balanced, THEIRS_NUM),
      "mean length": (
          length.mean(),
          length.std() / np.sqrt(num),
          length.std() / np.sqrt(THEIRS_NUM),
      ),
      "counting accuracy": share((gap == 0) == balanced, THEIRS_NUM),
  }


def tolerance(name, se_ours, se_theirs):
  """Z standard errors of the difference of two samples, plus rounding."""
  return Z * np.hypot(se_ours, se_theirs) + ROUNDING[name]


# ------------------------------------------------- the law at max_len = 2
# States: the 4 strings of 2 brackets as bits (first is '(', second is '('),
# so '()' = 2, ')(' = 1, '((' = 3, '))' = 0.
_STRINGS = {0: "))", 1: ")(", 2: "()", 3: "(("}


def _geometric_law(p, longest=200):
  """P(k) for k = 0 .. longest: Geometric(p) on {1, 2, ...}."""
  k = np.arange(longest + 1)
  return np.where(k >= 1, p * (1 - p) ** np.maximum(k - 1, 0), 0.0)


def _power_sum(law, step):
  """sum_k law[k] step^k: k steps of the 4x4 transition matrix `step`."""
  total, power = np.zeros((4, 4)), np.eye(4)
  for weight in law:
    total += weight * power
    power = power @ step
  return total


def two_bracket_law(swap_prob, geometric_p, double_prob):
  """The exact law of the strings of a mix at max_len 2, written from the
  rules: a uniform string (1/3) of length 1 or 2; else '()' (one pair) with
  mutation code c: 0 with probability 1/2 + 1/8, else 1, 2, 3 (1/8 each).
  c & 1: Geometric(geometric_p) swap attempts, each exchanging the two
  brackets with probability swap_prob. c & 2: Geometric(geometric_p) flips,
  doubled with double_prob, each of one uniform position."""
  exchange = np.eye(4)[[0, 2, 1, 3]]
  swap = (1 - swap_prob) * np.eye(4) + swap_prob * exchange
  flip = 0.5 * (np.eye(4)[[1, 0, 3, 2]] + np.eye(4)[[2, 3, 0, 1]])
  single = _geometric_law(geometric_p)
  doubled = np.zeros(2 * len(single) - 1)
  doubled[::2] = single
  swaps = _power_sum(single, swap)
  flips = _power_sum(
      (1 - double_prob) * np.pad(single, (0, len(single) - 1))
      + double_prob * doubled,
      flip,
  )
  start = np.eye(4)[2]  # '()'.
  grammar = (5 / 8) * start + (1 / 8) * (
      start @ swaps + start @ flips + start @ swaps @ flips
  )
  law = {"(": 1 / 12, ")": 1 / 12}
  for state, text in _STRINGS.items():
    law[text] = 1 / 3 * 1 / 2 * 1 / 4 + 2 / 3 * grammar[state]
  return law


# ------------------------------------------------------------------ generator


class ZaGeneratorTest(parameterized.TestCase):

  def test_grammar_matches_its_exact_law(self):
    # 42 words of 5 pairs, their probabilities from the recursion itself.
    law = dyck_reference.exact_grammar(5)
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
    self.assertGreater(
        stats.chisquare(observed, expected).pvalue, dyck_reference.P_FAIL
    )

  def test_grammar_rows_of_mixed_sizes_are_right_aligned(self):
    pairs = np.array([1, 3, 2, 5])
    open_BxL = dyck_mixes._grammar_words(np.random.default_rng(1), pairs, 10)
    for row, t in zip(open_BxL, pairs):
      self.assertFalse(row[: 10 - 2 * t].any())
      word = "".join("(" if o else ")" for o in row[10 - 2 * t :])
      self.assertIn(word, dyck_reference.exact_grammar(t))

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
      text = dyck_reference.ref_za(rng, max_len)
      if text not in held_out:
        ref.append(text)
    _, labels, texts = dyck.generate(
        200000, max_len, "za", seed=1, exclude=exclude
    )
    self.assertFalse(set(texts) & set(held_out))
    self.assertGreater(
        dyck_reference.two_sample_p(
            collections.Counter(texts), collections.Counter(ref)
        ),
        dyck_reference.P_FAIL,
    )
    for text, label in zip(texts[:2000], labels):
      self.assertEqual(bool(label), dyck_reference.ref_balanced(text), text)

  def test_the_reference_comparison_sees_a_different_mutation_rate(self):
    # The comparison above can fail: fewer mutations (p = 1) or more (p = 0.5)
    # than the generator's p are told apart on the same sample sizes.
    _, _, texts = dyck.generate(200000, 6, "za", seed=1)
    for p in (1.0, 0.5):
      rng = random.Random(0)
      ref = collections.Counter(
          dyck_reference.ref_za(rng, 6, p) for _ in range(60000)
      )
      self.assertLess(
          dyck_reference.two_sample_p(collections.Counter(texts), ref),
          dyck_reference.P_FAIL,
          p,
      )

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
      self.assertEqual(bool(label), dyck_reference.ref_balanced(text), text)

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
      self.assertEqual(bool(label), dyck_reference.ref_balanced(text), text)


class ZaExactTest(absltest.TestCase):

  def test_matches_their_code_where_za_does_not(self):
    start = time.perf_counter()
    exact = statistics("za_exact", NUM, seed=0)
    za = statistics("za", NUM, seed=0)
    print(
        f"statistics of {NUM} strings each: {time.perf_counter() - start:.1f}s"
    )
    for name, theirs in THEIRS.items():
      value, se_ours, se_theirs = exact[name]
      tol = tolerance(name, se_ours, se_theirs)
      print(
          f"{name}: theirs {theirs}, za_exact {value:.4f}, "
          f"za {za[name][0]:.4f}, tolerance {tol:.4f}"
      )
      self.assertLessEqual(abs(value - theirs), tol, name)
    # The table's one gap 'za' shows far beyond sampling error.
    name = "|#open - #close| = 2 among unbalanced"
    value, se_ours, se_theirs = za[name]
    self.assertGreater(
        abs(value - THEIRS[name]), tolerance(name, se_ours, se_theirs)
    )

  def test_exact_law_at_two_brackets(self):
    # Their rules (swap only when i < j: probability 1/4 of exchanging two
    # brackets; Geometric(1/2) counts) give this law exactly; 'za's rules
    # (i != j: 1/2; Geometric(0.8)) give another, and its sample is told apart.
    num = 200000
    laws = {
        "za_exact": two_bracket_law(0.25, 0.5, 2 / 3),
        "za": two_bracket_law(
            0.5, dyck_mixes.ZA_GEOMETRIC_P, dyck_mixes.ZA_DOUBLE_PROB
        ),
    }
    for mix, law in laws.items():
      self.assertAlmostEqual(sum(law.values()), 1.0)
      _, labels, texts = dyck.generate(num, 2, mix, seed=3)
      self.assertEqual(set(texts), set(law))
      for text, label in zip(texts, labels):
        self.assertEqual(bool(label), dyck.is_balanced(text))
      counts = {t: 0 for t in law}
      for text in texts:
        counts[text] += 1
      for text, p in law.items():
        se = np.sqrt(p * (1 - p) / num)
        self.assertLessEqual(abs(counts[text] / num - p), Z * se, (mix, text))
    # za's sample is not of za_exact's law.
    _, _, texts = dyck.generate(num, 2, "za", seed=3)
    z = [
        abs(texts.count(t) / num - p) / np.sqrt(p * (1 - p) / num)
        for t, p in laws["za_exact"].items()
    ]
    self.assertGreater(max(z), Z)

  def test_a_swap_with_i_not_below_j_does_nothing(self):
    # One attempt on '()': exchanged only when (i, j) = (0, 1), 1 in 4.
    num = 100000
    open_BxL = np.tile([True, False], (num, 1))
    lengths, rows = np.full(num, 2), np.arange(num)
    rng = np.random.default_rng(0)
    dyck_mixes._swaps(rng, open_BxL, lengths, rows, np.ones(num, int), True)
    exchanged = (~open_BxL[:, 0] & open_BxL[:, 1]).mean()
    self.assertAlmostEqual(exchanged, 0.25, delta=Z * np.sqrt(3 / 16 / num))
    # A string of one bracket is never changed by a swap.
    one = np.ones((num, 1), bool)
    dyck_mixes._swaps(rng, one, np.ones(num, int), rows, np.full(num, 5), True)
    self.assertTrue(one.all())

  def test_deterministic_lengths_and_held_out(self):
    for max_len in (2, 7, 60):
      tokens, labels, texts = dyck.generate(5000, max_len, "za_exact", seed=4)
      again, _ = dyck.generate_tokens(5000, max_len, "za_exact", seed=4)
      np.testing.assert_array_equal(tokens, again)
      lengths = np.array([len(t) for t in texts])
      self.assertEqual((lengths.min(), lengths.max()), (1, max_len))
      np.testing.assert_array_equal(labels, dyck.labels_of(tokens))
    held_out = dyck.key_set(dyck.encode(["()", ")("], max_len=2))
    _, _, texts = dyck.generate(500, 2, "za_exact", seed=0, exclude=held_out)
    self.assertEqual(sorted(set(texts)), ["(", "((", ")", "))"])

  def test_za_and_hard_outputs_unchanged(self):
    # Committed results depend on them bit for bit: digests of the module
    # before 'za_exact' was added (which shares its swap and flip helpers).
    digests = {"za": "1843ab7fdf805cfb", "hard": "954ae007ff5d5072"}
    for mix, digest in digests.items():
      tokens, labels = dyck.generate_tokens(20000, 60, mix, seed=0)
      data = tokens.tobytes() + labels.tobytes()
      self.assertEqual(hashlib.sha256(data).hexdigest()[:16], digest, mix)

  def test_the_dyck_config_draws_za_exact(self):
    # configs/dyck.py:mix=za_exact reaches this generator: its fixed
    # validation set is the mix's draw from the validation stream.
    config = dyck_config.get_config("mix=za_exact")
    task = data.make_task(config)
    want, labels = dyck.generate_tokens(
        4000, 60, "za_exact", data.stream_seed(0, data.Dyck.SPLITS["valid"])
    )
    valid = task.held_out("valid")
    np.testing.assert_array_equal(valid["tokens"], want)
    np.testing.assert_array_equal(valid["labels"][:, -1], labels)
    batch = task.batch(2000, seed=1)
    self.assertFalse(
        dyck.contains(task.exclude, dyck.keys(batch["tokens"])).any()
    )


if __name__ == "__main__":
  absltest.main()
