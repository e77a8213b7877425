"""ut.training.tasks.khop: the k-hop generator against a brute-force reference.

The reference below is written here, independently of the module, straight
from the definition. The letter-label share is printed; run with `pytest -s`
to see it.
"""

import doctest

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from ut.training.tasks import khop


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


if __name__ == "__main__":
  absltest.main()
