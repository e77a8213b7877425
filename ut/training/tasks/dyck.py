"""Dyck-1: is a string of parentheses balanced? Deterministic numpy generators.

A string over '(' and ')' is balanced when every prefix has at least as many
'(' as ')' and the whole string has equally many of each.

Shapes and vocabulary:

  B         batch (number of strings)
  L         max_len, the longest string allowed
  T         tokens per row, L + 1
  PAD   = 0   left padding
  OPEN  = 1   '('
  CLOSE = 2   ')'
  QUERY = 3   '?', always the last token; the model reads its class there
  VOCAB_SIZE  = 4
  NUM_CLASSES = 2   label 1 = balanced, 0 = not balanced

A row is LEFT-padded, so the query sits at position T - 1 whatever the length:

  tokens_BxT = [PAD, ..., PAD, s_1, ..., s_len, QUERY]

Mixes (``generate(..., mix=...)``), written for L = 60 as in Zhong & Andreas
(2024); another L scales the lengths:

  'za'    Zhong & Andreas's generator (DESIGN §7). Each example independently:
            with probability 1/3, a uniformly random string over '()' with
              length uniform in [1, L];
            with probability 2/3, a balanced string of t pairs, t uniform in
              [1, L // 2], from the grammar B(1) = '()', and for t >= 2 with
              probability 1/2 B(t) = '(' + B(t - 1) + ')', otherwise
              B(t) = B(u) + B(t - u) with u uniform in [1, t - 1]. Half of
              these are kept as they are; the other half get a mutation code c
              uniform in {0, 1, 2, 3}:
                c & 1: n_swap ~ Geometric(ZA_GEOMETRIC_P) swaps, one after the
                       other, each of the brackets at two independent uniform
                       positions (equal positions: no change);
                c & 2: n_flip ~ Geometric(ZA_GEOMETRIC_P) flips, doubled with
                       probability ZA_DOUBLE_PROB, each turning the bracket at a
                       uniform position (repeats allowed: a position flipped
                       twice is back) into the other one.
          Geometric(p) counts trials up to the first success: 1, 2, ... with
          mean 1 / p. Labels are the TRUE balancedness of the result (a stack
          check). Zhong & Andreas state the mix's statistics, not p: about
          52.5% balanced, mean length about 31, at most 60, counting '('
          against ')' about 93% right, and among the unbalanced strings about
          15% with equal counts. We chose p = 0.8 (mean 1.25 swaps, and
          1.25 flips before doubling), which gives 52.4% balanced, mean length
          30.8 (= 30.5 / 3 + 2 * 31 / 3 whatever p), counting 92.9% right
          and 15.0% of the unbalanced with equal counts (on 4 million
          strings); a smaller p mutates more (p = 0.5: about 51% balanced,
          counting 92%). tests/training/tasks/dyck_mixes_test.py checks
          these statistics.
  'za_exact'  the rules of Zhong & Andreas's own generator
          (task_dyckstream.py in github.com/fjzzq2002/random_transformers,
          whose length parameter is L // 2 pairs). As 'za' except:
            every example draws a mutation code c uniform in {0, 1, 2, 3};
              a grammar string keeps it with probability 1/2 (else c = 0),
              a uniform string always keeps it (its distribution stays
              uniform: mutation positions do not depend on the brackets);
            n_swap and n_flip (before doubling) are Geometric(1/2), mean 2;
            a swap draws positions i, j uniform and independent and does
              nothing unless i < j (so about half the swaps are no-ops).
          Swaps come before flips. On 800k strings (seeds 0-3): 52.5%
          balanced, mean length 30.8, counting 93.1% right; among the
          unbalanced 14.6% with equal counts, 17.9% with |#'(' - #')'| = 2,
          19.3% with 4 (their code, same rules: about 14.7%, 17.8%, 19.3%).
          tests/training/tasks/dyck_mixes_test.py checks these against their
          code's figures.
  'hard'  exactly num // 2 balanced strings (uniform Dyck words) and
          num - num // 2 negatives (one more negative when num is odd), with
          1 to L // 2 pairs (an even length uniform in [2, L]). A negative has
          equally many '(' and ')' and is not balanced (uniform among such
          strings of its length), so counting alone scores exactly 50%.
          Positives and negatives are shuffled.

Held-out strings: `generate(..., exclude=key_set(held_out_tokens))` redraws
every row equal to a held-out row (compared by fixed-width byte keys, `keys`),
from the same random stream, until none is left: still a deterministic
function of the seed, and the rows that were not held out stay as drawn.

Worked examples:

>>> is_balanced('(())()'), is_balanced('())('), is_balanced('')
(True, False, True)
>>> encode(['()', '(()'], max_len=4)
array([[0, 0, 1, 2, 3],
       [0, 1, 1, 2, 3]], dtype=int32)
>>> decode(encode([')(', '(())'], max_len=4))
[')(', '(())']
>>> tokens, labels, texts = generate(4, max_len=8, mix='hard', seed=0)
>>> tokens.shape, labels.shape, int(labels.sum())
((4, 9), (4,), 2)
>>> all(bool(l) == is_balanced(t) for l, t in zip(labels, texts))
True
>>> counting_baseline_accuracy(texts, labels)
0.5
>>> counting_baseline(['()', ')(', '(()'])
array([1, 1, 0], dtype=int32)
>>> held_out = key_set(encode(['()', ')('], max_len=2))
>>> _, _, texts = generate(50, max_len=2, mix='za', seed=0, exclude=held_out)
>>> sorted(set(texts))
['(', '((', ')', '))']
"""

from collections.abc import Sequence

import numpy as np

from ut.training.tasks import dyck_mixes

# The mixes' draws (`dyck_mixes._za`, ...) serve this module alone.
# pylint: disable=protected-access

PAD = 0
OPEN = 1
CLOSE = 2
QUERY = 3
VOCAB_SIZE = 4
NUM_CLASSES = 2

MIXES = ("za", "za_exact", "hard")
# Their generators and the mutation constants (ZA_GEOMETRIC_P, ZA_DOUBLE_PROB,
# ZA_EXACT_GEOMETRIC_P) are in `dyck_mixes`.

# `generate` redraws an excluded row in rounds of REDRAW_COPIES candidates, at
# most MAX_REDRAWS rounds before giving up.
REDRAW_COPIES = 4
MAX_REDRAWS = 100

# Breakdowns (`breakdown`): length buckets of this many brackets, and the
# longest balanced strings counted as short.
BUCKET = 10
SHORT = 10

_CHAR_TO_ID = {"(": OPEN, ")": CLOSE}
_CHARS = np.array([b"", b"(", b")", b""], dtype="S1")  # By token id.


def is_balanced(text: str) -> bool:
  """True when no prefix of `text` has more ')' than '(' and the counts match."""
  depth = 0
  for char in text:
    depth += 1 if char == "(" else -1
    if depth < 0:
      return False
  return depth == 0


def encode(texts: Sequence[str], max_len: int) -> np.ndarray:
  """Left-padded int32 tokens (B, max_len + 1) ending in QUERY; see the glossary."""
  tokens_BxT = np.full((len(texts), max_len + 1), PAD, dtype=np.int32)
  tokens_BxT[:, -1] = QUERY
  for b, text in enumerate(texts):
    for position, char in enumerate(text):
      if char not in _CHAR_TO_ID:
        raise ValueError(
            f"text {b}: character {char!r} at position {position} is not "
            "'(' or ')'."
        )
    if len(text) > max_len:
      raise ValueError(
          f"text {b} has length {len(text)}, over the limit max_len={max_len}; "
          f"use max_len >= {len(text)} or a shorter text."
      )
    if text:
      tokens_BxT[b, max_len - len(text) : max_len] = [
          _CHAR_TO_ID[c] for c in text
      ]
  return tokens_BxT


def decode(tokens) -> list[str]:
  """Inverse of `encode`: drops PAD and QUERY. Accepts (B, T) or a single (T,)."""
  tokens_BxT = np.atleast_2d(np.asarray(tokens))
  chars_BxT = _CHARS[tokens_BxT]
  return [row.tobytes().replace(b"\0", b"").decode() for row in chars_BxT]


def counting_baseline(texts: Sequence[str]) -> np.ndarray:
  """Predicts 1 (balanced) iff count('(') == count(')'); int32 (B,)."""
  return np.array([t.count("(") == t.count(")") for t in texts], dtype=np.int32)


def counting_baseline_accuracy(texts: Sequence[str], labels) -> float:
  """Accuracy of `counting_baseline` against `labels` (B,)."""
  labels_B = np.asarray(labels)
  if labels_B.shape != (len(texts),):
    raise ValueError(
        f"labels have shape {labels_B.shape}; expected ({len(texts)},), one "
        "per text."
    )
  return float(np.mean(counting_baseline(texts) == labels_B))


# ------------------------------------------------------------ held-out keys


def keys(tokens_BxT) -> np.ndarray:
  """One fixed-width byte key per token row (B,): equal rows, equal keys.

  The key packs the bits (token == OPEN, token == PAD) of the row, which fix
  it (every row ends in QUERY). Compare keys of rows of one width only.
  """
  tokens_BxT = np.asarray(tokens_BxT)
  bits = np.concatenate([tokens_BxT == OPEN, tokens_BxT == PAD], axis=1)
  packed = np.ascontiguousarray(np.packbits(bits, axis=1))
  return packed.view(f"V{packed.shape[1]}").reshape(len(tokens_BxT))


def key_set(*token_arrays) -> np.ndarray:
  """The sorted distinct keys of the rows of all `token_arrays` (each (B, T))."""
  return np.unique(np.concatenate([keys(t) for t in token_arrays]))


def contains(sorted_keys: np.ndarray, query_keys: np.ndarray) -> np.ndarray:
  """bool (B,): which `query_keys` are in `sorted_keys` (from `key_set`)."""
  if not len(sorted_keys) or not len(query_keys):
    return np.zeros(len(query_keys), bool)
  if sorted_keys.dtype != query_keys.dtype:
    raise ValueError(
        f"keys of {query_keys.dtype.itemsize}-byte rows checked "
        f"against a set of {sorted_keys.dtype.itemsize}-byte "
        "rows: the token rows differ in width (max_len)."
    )
  index = np.minimum(
      np.searchsorted(sorted_keys, query_keys), len(sorted_keys) - 1
  )
  return sorted_keys[index] == query_keys


def _tokens(open_BxL, lengths):
  """Left-padded tokens (B, L + 1) of right-aligned strings (open_BxL, lengths)."""
  num, max_len = open_BxL.shape
  tokens_BxT = np.full((num, max_len + 1), QUERY, dtype=np.int32)
  chars_BxL = np.uint8(CLOSE) - open_BxL.view(np.uint8)  # OPEN is CLOSE - 1,
  chars_BxL *= np.arange(max_len) >= max_len - lengths[:, None]  # PAD is 0.
  tokens_BxT[:, :max_len] = chars_BxL
  return tokens_BxT


def labels_of(tokens_BxT) -> np.ndarray:
  """int32 (B,): 1 where the row's string is balanced (a stack check)."""
  tokens_BxT = np.asarray(tokens_BxT)
  step = (tokens_BxT == OPEN).astype(np.int16) - (tokens_BxT == CLOSE)
  depth = np.cumsum(step, axis=1, dtype=np.int16)
  return ((depth.min(axis=1, initial=0) >= 0) & (depth[:, -1] == 0)).astype(
      np.int32
  )


def _check(num, max_len, mix):
  if mix not in MIXES:
    raise ValueError(
        f"unknown mix {mix!r}; valid mixes are {MIXES}."
    )
  if max_len < 2:
    raise ValueError(f"max_len={max_len} is too short; use max_len >= 2.")
  if num < 0:
    raise ValueError(f"num={num} is negative; use num >= 0.")


def generate_tokens(
    num: int,
    max_len: int,
    mix: str,
    seed: int,
    exclude: np.ndarray | None = None,
):
  """`generate` without the texts: tokens int32 (num, T), labels int32 (num,)."""
  _check(num, max_len, mix)
  rng = np.random.default_rng(seed)
  if mix == "za":
    draw = lambda rows: dyck_mixes._za(rng, len(rows), max_len)
  elif mix == "za_exact":
    draw = lambda rows: dyck_mixes._za_exact(rng, len(rows), max_len)
  else:
    positive = np.zeros(num, bool)
    positive[rng.permutation(num)[: num // 2]] = True
    draw = lambda rows: dyck_mixes._hard(rng, positive[rows], max_len)
  tokens_BxT = _tokens(*draw(np.arange(num)))
  if exclude is None:
    return tokens_BxT, labels_of(tokens_BxT)
  rows = np.arange(num)
  for redraw in range(MAX_REDRAWS + 1):
    rows = rows[contains(exclude, keys(tokens_BxT[rows]))]
    if not len(rows):
      break
    if redraw == MAX_REDRAWS:
      raise ValueError(
          f"{len(rows)} of {num} strings were still held-out strings after "
          f"{MAX_REDRAWS} rounds of redraws: the held-out sets hold almost "
          f"every string that mix {mix!r} draws at max_len={max_len}; use a "
          "larger max_len or smaller held-out sets."
      )
    # REDRAW_COPIES candidates per excluded row (one round is then nearly
    # always enough); each row takes its first candidate that is not excluded.
    candidates_CxR = np.tile(rows, (REDRAW_COPIES, 1))
    drawn = _tokens(*draw(candidates_CxR.reshape(-1)))
    ok_CxR = ~contains(exclude, keys(drawn)).reshape(candidates_CxR.shape)
    first_R = np.argmax(ok_CxR, axis=0)
    found_R = ok_CxR[first_R, np.arange(len(rows))]
    choice = first_R * len(rows) + np.arange(len(rows))
    tokens_BxT[rows[found_R]] = drawn[choice[found_R]]
  return tokens_BxT, labels_of(tokens_BxT)


def generate(
    num: int,
    max_len: int,
    mix: str,
    seed: int,
    exclude: np.ndarray | None = None,
):
  """Returns tokens int32 (num, max_len + 1), labels int32 (num,), texts.

  Deterministic given `seed` (and `exclude`). See the module docstring for the
  mixes. exclude: sorted keys (`key_set`) of rows never to return; such rows
  are redrawn.
  """
  tokens_BxT, labels_B = generate_tokens(num, max_len, mix, seed, exclude)
  return tokens_BxT, labels_B, decode(tokens_BxT)


# --------------------------------------------------------------- breakdowns

SUBSETS = ("balanced", "unbalanced_unequal_counts", "unbalanced_equal_counts")


def breakdown(texts: Sequence[str], labels, predictions, max_len=None):
  """Accuracy of `predictions` (B,) against `labels` (B,), overall and by part.

  Returns dict(num, accuracy, by_length, by_subset, short_balanced): each part
  is dict(num, accuracy) (accuracy None when num is 0). by_length buckets the
  strings by their number of brackets into '1-10', '11-20', ... up to the
  bucket of the longest text or max_len, and '0' for empty strings
  when there are any. by_subset: balanced strings; unbalanced strings with
  unequal counts of '(' and ')'; unbalanced strings with equal counts.
  short_balanced: balanced strings of at most SHORT brackets. Subsets follow
  the texts themselves (`is_balanced`), whatever `labels` say.
  """
  labels_B = np.asarray(labels).astype(np.int64)
  predictions_B = np.asarray(predictions).astype(np.int64)
  if labels_B.shape != (len(texts),) or predictions_B.shape != (len(texts),):
    raise ValueError(
        f"{len(texts)} texts need ({len(texts)},) labels and "
        f"predictions; got {labels_B.shape} and "
        f"{predictions_B.shape}"
    )
  correct_B = predictions_B == labels_B
  length_B = np.array([len(t) for t in texts], np.int64)
  equal_B = np.array([t.count("(") == t.count(")") for t in texts], bool)
  balanced_B = np.array([is_balanced(t) for t in texts], bool)

  def part(mask):
    n = int(mask.sum())
    return dict(num=n, accuracy=float(correct_B[mask].mean()) if n else None)

  longest = max(int(length_B.max(initial=0)), max_len or 0)
  by_length = {}
  if (length_B == 0).any():
    by_length["0"] = part(length_B == 0)
  for low in range(1, longest + 1, BUCKET):
    high = low + BUCKET - 1
    by_length[f"{low}-{high}"] = part((length_B >= low) & (length_B <= high))
  return dict(
      num=len(texts),
      accuracy=float(correct_B.mean()) if len(texts) else None,
      by_length=by_length,
      by_subset=dict(
          zip(
              SUBSETS,
              (
                  part(balanced_B),
                  part(~balanced_B & ~equal_B),
                  part(~balanced_B & equal_B),
              ),
          )
      ),
      short_balanced=part(balanced_B & (length_B <= SHORT)),
  )
