"""Dyck-1: is a string of parentheses balanced? Deterministic numpy generators.

A string over '(' and ')' is balanced when every prefix has at least as many
'(' as ')' and the whole string has equally many of each.

Shapes and vocabulary:

  B         batch (number of strings)
  max_len   longest string allowed; every row has T = max_len + 1 tokens
  PAD   = 0   left padding
  OPEN  = 1   '('
  CLOSE = 2   ')'
  QUERY = 3   '?', always the last token; the model reads its class there
  VOCAB_SIZE  = 4
  NUM_CLASSES = 2   label 1 = balanced, 0 = not balanced

A row is LEFT-padded, so the query sits at position T - 1 whatever the length:

  tokens_BxT = [PAD, ..., PAD, s_1, ..., s_len, QUERY]

Mixes (``generate(..., mix=...)``):

  'za'    in the style of Zhong & Andreas (2024). Each example independently
          falls in one of three equally likely groups:
            1. a uniformly random string over '()' with length uniform in
               [2, max_len];
            2. a uniformly random Dyck word (balanced string) with an even
               length uniform in [2, max_len];
            3. such a Dyck word, perturbed: one position, chosen uniformly, is
               redrawn uniformly from '()'. Half the time the redraw leaves the
               character unchanged (the string stays balanced); otherwise the
               bracket is flipped and the counts differ by two.
          Labels are always the TRUE balancedness (``is_balanced``), not the
          group. About half the strings come out balanced (0.51 at max_len
          16 and 32), and comparing the number of '(' with the number of ')'
          already scores 0.96 (max_len 16) to 0.97 (max_len 32); it fails only
          on random strings with equal counts that are not balanced. (Zhong &
          Andreas report about 52% balanced and 93% for counting; their
          lengths and perturbation are not known here.)
  'hard'  exactly num // 2 balanced strings (uniform Dyck words) and
          num - num // 2 negatives (one more negative when num is odd). A
          negative has an even length, equally many '(' and ')', and is not
          balanced (uniform among such strings of its length), so counting
          alone scores exactly 50%. Positives and negatives are shuffled.

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
"""

from collections.abc import Sequence

import numpy as np

PAD = 0
OPEN = 1
CLOSE = 2
QUERY = 3
VOCAB_SIZE = 4
NUM_CLASSES = 2

MIXES = ('za', 'hard')

_CHAR_TO_ID = {'(': OPEN, ')': CLOSE}
_ID_TO_CHAR = {OPEN: '(', CLOSE: ')'}


def is_balanced(text: str) -> bool:
  """True when no prefix of `text` has more ')' than '(' and the counts match."""
  depth = 0
  for char in text:
    depth += 1 if char == '(' else -1
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
            f'text {b}: character {char!r} at position {position} is not '
            "'(' or ')'.")
    if len(text) > max_len:
      raise ValueError(
          f'text {b} has length {len(text)}, over the limit max_len={max_len}; '
          f'use max_len >= {len(text)} or a shorter text.')
    if text:
      tokens_BxT[b, max_len - len(text):max_len] = [_CHAR_TO_ID[c] for c in text]
  return tokens_BxT


def decode(tokens) -> list[str]:
  """Inverse of `encode`: drops PAD and QUERY. Accepts (B, T) or a single (T,)."""
  tokens_BxT = np.atleast_2d(np.asarray(tokens))
  return [''.join(_ID_TO_CHAR[int(t)] for t in row if int(t) in _ID_TO_CHAR)
          for row in tokens_BxT]


def counting_baseline(texts: Sequence[str]) -> np.ndarray:
  """Predicts 1 (balanced) iff count('(') == count(')'); int32 (B,)."""
  return np.array([t.count('(') == t.count(')') for t in texts], dtype=np.int32)


def counting_baseline_accuracy(texts: Sequence[str], labels) -> float:
  """Accuracy of `counting_baseline` against `labels` (B,)."""
  labels_B = np.asarray(labels)
  if labels_B.shape != (len(texts),):
    raise ValueError(
        f'labels have shape {labels_B.shape}; expected ({len(texts)},), one '
        'per text.')
  return float(np.mean(counting_baseline(texts) == labels_B))


def _random_lengths(rng: np.random.Generator, num: int, max_len: int,
                    even: bool) -> np.ndarray:
  if even:
    return 2 * rng.integers(1, max_len // 2 + 1, size=num)
  return rng.integers(2, max_len + 1, size=num)


def _shuffled_steps(rng: np.random.Generator, ups: np.ndarray,
                    downs: np.ndarray, width: int) -> np.ndarray:
  """Row b: ups[b] +1s and downs[b] -1s in a uniformly random order, then 0s."""
  position = np.arange(width)
  steps = np.where(position < ups[:, None], 1,
                   np.where(position < (ups + downs)[:, None], -1, 0))
  keys = rng.random((len(ups), width))
  keys[position >= (ups + downs)[:, None]] = np.inf  # Padding stays last.
  return np.take_along_axis(steps, np.argsort(keys, axis=1), axis=1)


def _random_dyck_words(rng: np.random.Generator, lengths: np.ndarray) -> np.ndarray:
  """Steps (+1 '(', -1 ')', 0 past the end) of Dyck words of the even `lengths`,
  each uniform among all Dyck words of its length (cycle lemma).

  Shuffle n + 1 up-steps and n down-steps. Exactly one rotation keeps every
  partial sum positive: the one starting right after the last minimum of the
  prefix sums. Rotate there and drop the leading up-step.
  """
  n = lengths // 2
  width = int(lengths.max(initial=0)) + 1
  steps = _shuffled_steps(rng, n + 1, n, width)
  prefix = np.cumsum(steps, axis=1) - steps  # P_0 .. P_{2n} in the valid part.
  position = np.arange(width)
  valid = position <= (2 * n)[:, None]
  prefix = np.where(valid, prefix, np.iinfo(prefix.dtype).max)
  last_min = width - 1 - np.argmin(prefix[:, ::-1], axis=1)
  source = (last_min[:, None] + 1 + position[None, :-1]) % (2 * n + 1)[:, None]
  words = np.take_along_axis(steps, source, axis=1)
  return np.where(position[None, :-1] < lengths[:, None], words, 0)


def _strings(steps: np.ndarray, lengths: np.ndarray) -> list[str]:
  chars = np.where(steps > 0, b'(', b')')
  return [row.tobytes().decode()[:length] for row, length in zip(chars, lengths)]


def _balanced(steps: np.ndarray) -> np.ndarray:
  """Rows of steps (0 past the end) that spell a balanced string."""
  return (np.cumsum(steps, axis=1).min(axis=1, initial=0) >= 0) & (
      steps.sum(axis=1) == 0)


def _za_steps(rng: np.random.Generator, num: int, max_len: int):
  """The 'za' mix: per row a group in {random, Dyck word, perturbed Dyck word}."""
  group = rng.integers(3, size=num)
  random_lengths = _random_lengths(rng, num, max_len, even=False)
  random_steps = 2 * rng.integers(2, size=(num, max_len)) - 1
  random_steps[np.arange(max_len) >= random_lengths[:, None]] = 0
  word_lengths = _random_lengths(rng, num, max_len, even=True)
  words = np.zeros((num, max_len), np.int64)
  words[:, :int(word_lengths.max(initial=0))] = _random_dyck_words(
      rng, word_lengths)
  position = (rng.random(num) * word_lengths).astype(np.int64)
  redraw = 2 * rng.integers(2, size=num) - 1
  perturbed = words.copy()
  perturbed[np.arange(num), position] = redraw
  steps = np.where((group == 0)[:, None], random_steps,
                   np.where((group == 1)[:, None], words, perturbed))
  return steps, np.where(group == 0, random_lengths, word_lengths)


def _hard_steps(rng: np.random.Generator, num: int, max_len: int):
  """The 'hard' mix: num // 2 Dyck words, the rest unbalanced strings with
  equal counts (uniform among such strings of their length, by rejection: a
  shuffle is balanced with probability 1 / (n + 1) <= 1/2), shuffled."""
  lengths = _random_lengths(rng, num, max_len, even=True)
  steps = np.zeros((num, max_len), np.int64)
  half = num // 2
  steps[:half, :int(lengths[:half].max(initial=0))] = _random_dyck_words(
      rng, lengths[:half])
  todo = np.arange(half, num)
  while len(todo):
    n = lengths[todo] // 2
    steps[todo] = _shuffled_steps(rng, n, n, max_len)
    todo = todo[_balanced(steps[todo])]
  order = rng.permutation(num)
  return steps[order], lengths[order]


def generate(num: int, max_len: int, mix: str, seed: int):
  """Returns tokens int32 (num, max_len + 1), labels int32 (num,), texts.

  Deterministic given `seed`. See the module docstring for the mixes.
  """
  if mix not in MIXES:
    raise ValueError(f'unknown mix {mix!r}; valid mixes are {MIXES}.')
  if max_len < 2:
    raise ValueError(f'max_len={max_len} is too short; use max_len >= 2.')
  if num < 0:
    raise ValueError(f'num={num} is negative; use num >= 0.')
  rng = np.random.default_rng(seed)
  steps, lengths = (_za_steps if mix == 'za' else _hard_steps)(rng, num, max_len)
  labels_B = _balanced(steps).astype(np.int32)
  # Left-pad: token column c holds step c - (max_len - length) of its row.
  source = np.arange(max_len)[None] - (max_len - lengths)[:, None]
  chars = np.take_along_axis(steps, np.maximum(source, 0), axis=1)
  tokens_BxT = np.full((num, max_len + 1), QUERY, dtype=np.int32)
  tokens_BxT[:, :max_len] = np.where(source < 0, PAD,
                                     np.where(chars > 0, OPEN, CLOSE))
  return tokens_BxT, labels_B, _strings(steps, lengths)
