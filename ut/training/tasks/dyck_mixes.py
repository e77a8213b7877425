"""The Dyck-1 mixes' generators (`dyck.generate`'s mix; the dyck module
docstring states each mix's rules and statistics).

A batch of strings is (open_BxL bool, lengths_B): row b spells
open_BxL[b, L - lengths_B[b]:] ('(' where True), right-aligned as in the
tokens, False before it. `_za`, `_za_exact` and `_hard` draw one mix each from
a numpy Generator; `dyck.generate_tokens` turns them into tokens.
"""

import numpy as np

# The 'za' mutation (module docstring): swaps and flips come in
# Geometric(ZA_GEOMETRIC_P) numbers; flips are doubled with ZA_DOUBLE_PROB.
ZA_GEOMETRIC_P = 0.8
ZA_DOUBLE_PROB = 2 / 3
# 'za_exact' draws both numbers as Zhong & Andreas's code does: 1 + Geometric
# on {0, 1, ...} with a fair coin, that is Geometric(1/2) on {1, 2, ...}.
ZA_EXACT_GEOMETRIC_P = 0.5


def _uniform_strings(rng, num, max_len):
  """Uniformly random strings with lengths uniform in [1, max_len]."""
  lengths = rng.integers(1, max_len + 1, size=num)
  open_BxL = rng.integers(0, 2, size=(num, max_len), dtype=np.uint8) > 0
  open_BxL &= np.arange(max_len) >= max_len - lengths[:, None]
  return open_BxL, lengths


def _grammar_words(rng, pairs, width):
  """open_BxW: row b one balanced string of pairs[b] pairs from the grammar,
  right-aligned.

  The recursion B(t) runs top-down over all rows at once. A pending node is
  (row, start, t): B(t) fills positions [start, start + 2t) of its row. A run
  of wraps comes first: each wrap has probability 1/2 while the inner size is
  >= 2, so there are w = min(G, t - 1) of them with G ~ Geometric(1/2) on
  {0, 1, ...}, giving '(' at [start, start + w) and ')' at the mirror
  positions. If t - w = 1 the core is '()'; else it splits into B(u) and
  B(t - w - u), two new nodes. Only the runs of '(' are recorded (+1 at a
  run's first position, -1 after its last); every other position is ')'.
  """
  num = len(pairs)
  run_starts = np.zeros(num * width + 1, np.int8)
  run_ends = np.zeros(num * width + 1, np.int8)
  size = np.asarray(pairs)
  base = np.arange(num) * width + width - 2 * size  # Flat index of the start.
  while size.size:
    wraps = np.minimum(rng.geometric(0.5, size=size.size) - 1, size - 1)
    core = size - wraps
    leaf = core == 1  # Down to '()': one run of `size` '('.
    run = np.where(leaf, size, wraps)
    has = run > 0
    run_starts[base[has]] = 1
    run_ends[base[has] + run[has]] = 1
    split = ~leaf
    core = core[split]
    base = base[split] + wraps[split]
    left = rng.integers(1, core)  # u uniform in [1, core - 1].
    base = np.concatenate([base, base + 2 * left])
    size = np.concatenate([left, core - left])
  inside_run = np.cumsum(run_starts - run_ends, dtype=np.int8)[:-1]
  return inside_run.reshape(num, width) > 0


def _unmutated(rng, u, g, max_len):
  """(open_BxL, lengths) before mutation: uniform strings at rows u, then
  grammar strings of a uniform number of pairs at rows g, in that draw order."""
  num = len(u) + len(g)
  open_BxL = np.empty((num, max_len), bool)
  lengths = np.empty(num, np.int64)
  open_BxL[u], lengths[u] = _uniform_strings(rng, len(u), max_len)
  pairs = rng.integers(1, max_len // 2 + 1, size=len(g))
  lengths[g] = 2 * pairs
  open_BxL[g] = _grammar_words(rng, pairs, max_len)
  return open_BxL, lengths


def _za(rng, num, max_len):
  """The 'za' mix: uniform strings (1/3) and grammar strings, half mutated."""
  grammar = rng.random(num) < 2 / 3
  g = np.flatnonzero(grammar)
  u = np.flatnonzero(~grammar)
  open_BxL, lengths = _unmutated(rng, u, g, max_len)
  mutated = rng.random(len(g)) < 0.5
  code = rng.integers(0, 4, size=len(g))
  _swap(rng, open_BxL, lengths, g[mutated & (code & 1 > 0)])
  _flip(rng, open_BxL, lengths, g[mutated & (code & 2 > 0)])
  return open_BxL, lengths


def _swap(rng, open_BxL, lengths, rows):
  """Geometric numbers of swaps per row, one after the other; each swaps the
  brackets at two independent uniform positions (the same one: no change)."""
  count = rng.geometric(ZA_GEOMETRIC_P, size=len(rows))
  _swaps(rng, open_BxL, lengths, rows, count, ordered_only=False)


def _swaps(rng, open_BxL, lengths, rows, count, ordered_only):
  """count[k] swaps of row rows[k], one after the other, each of the brackets
  at two independent uniform positions i, j; skipped when i >= j if
  ordered_only (else i == j is the only no-op)."""
  first = open_BxL.shape[1] - lengths  # Where each string starts.
  for k in range(int(count.max(initial=0))):
    r = rows[count > k]
    i = first[r] + rng.integers(0, lengths[r])
    j = first[r] + rng.integers(0, lengths[r])
    if ordered_only:
      r, i, j = r[i < j], i[i < j], j[i < j]
    open_BxL[r, i], open_BxL[r, j] = open_BxL[r, j], open_BxL[r, i]


def _flip(rng, open_BxL, lengths, rows):
  """Geometric numbers of flips per row, doubled with ZA_DOUBLE_PROB; a
  position flipped twice is back as it was."""
  count = rng.geometric(ZA_GEOMETRIC_P, size=len(rows))
  count *= np.where(rng.random(len(rows)) < ZA_DOUBLE_PROB, 2, 1)
  _flips(rng, open_BxL, lengths, rows, count)


def _flips(rng, open_BxL, lengths, rows, count):
  """count[k] flips of row rows[k], each at a uniform position (repeats
  allowed); flips commute, so only each position's parity matters."""
  r = np.repeat(rows, count)
  width = open_BxL.shape[1]
  flat = r * width + width - lengths[r] + rng.integers(0, lengths[r])
  flat, times = np.unique(flat, return_counts=True)
  open_BxL.reshape(-1)[flat[times % 2 == 1]] ^= True


def _za_exact(rng, num, max_len):
  """The 'za_exact' mix (module docstring): uniform strings (1/3) and grammar
  strings; every row drawn a mutation code, which half the grammar rows drop."""
  uniform = rng.random(num) < 1 / 3
  u = np.flatnonzero(uniform)
  g = np.flatnonzero(~uniform)
  open_BxL, lengths = _unmutated(rng, u, g, max_len)
  code = rng.integers(0, 4, size=num)
  code[g[rng.random(len(g)) < 0.5]] = 0
  rows = np.flatnonzero(code & 1)
  count = rng.geometric(ZA_EXACT_GEOMETRIC_P, size=len(rows))
  _swaps(rng, open_BxL, lengths, rows, count, ordered_only=True)
  rows = np.flatnonzero(code & 2)
  count = rng.geometric(ZA_EXACT_GEOMETRIC_P, size=len(rows))
  count *= np.where(rng.random(len(rows)) < ZA_DOUBLE_PROB, 2, 1)
  _flips(rng, open_BxL, lengths, rows, count)
  return open_BxL, lengths


def _shuffled_steps(
    rng: np.random.Generator, ups: np.ndarray, downs: np.ndarray, width: int
) -> np.ndarray:
  """Row b: ups[b] +1s and downs[b] -1s in a uniformly random order, then 0s."""
  position = np.arange(width)
  steps = np.where(
      position < ups[:, None],
      np.int8(1),
      np.where(position < (ups + downs)[:, None], np.int8(-1), np.int8(0)),
  )
  keys_BxW = rng.random((len(ups), width), dtype=np.float32)
  keys_BxW[position >= (ups + downs)[:, None]] = np.inf  # Padding stays last.
  return np.take_along_axis(steps, np.argsort(keys_BxW, axis=1), axis=1)


def _random_dyck_words(
    rng: np.random.Generator, lengths: np.ndarray
) -> np.ndarray:
  """Steps (+1 '(', -1 ')', 0 past the end) of Dyck words of the even `lengths`,
  each uniform among all Dyck words of its length (cycle lemma).

  Shuffle n + 1 up-steps and n down-steps. Exactly one rotation keeps every
  partial sum positive: the one starting right after the last minimum of the
  prefix sums. Rotate there and drop the leading up-step.
  """
  n = lengths // 2
  width = int(lengths.max(initial=0)) + 1
  steps = _shuffled_steps(rng, n + 1, n, width)
  prefix = np.cumsum(steps, axis=1, dtype=np.int16) - steps  # P_0 .. P_{2n}.
  position = np.arange(width)
  valid = position <= (2 * n)[:, None]
  prefix = np.where(valid, prefix, np.iinfo(prefix.dtype).max)
  last_min = width - 1 - np.argmin(prefix[:, ::-1], axis=1)
  source = (last_min[:, None] + 1 + position[None, :-1]) % (2 * n + 1)[:, None]
  words = np.take_along_axis(steps, source, axis=1)
  return np.where(position[None, :-1] < lengths[:, None], words, 0)


def _balanced_steps(steps: np.ndarray) -> np.ndarray:
  """Rows of steps (0 past the end) that spell a balanced string."""
  depth = np.cumsum(steps, axis=1, dtype=np.int16)
  return (depth.min(axis=1, initial=0) >= 0) & (depth[:, -1] == 0)


def _hard(rng, positive, max_len):
  """'hard' rows: where positive, a uniform Dyck word; elsewhere a uniform
  unbalanced string with equal counts (by rejection: a shuffle is balanced
  with probability 1 / (n + 1) <= 1/2). Even lengths uniform in [2, max_len]."""
  num = len(positive)
  lengths = 2 * rng.integers(1, max_len // 2 + 1, size=num)
  steps = np.zeros((num, max_len), np.int8)
  pos = np.flatnonzero(positive)
  steps[pos, : int(lengths[pos].max(initial=0))] = _random_dyck_words(
      rng, lengths[pos]
  )
  todo = np.flatnonzero(~positive)
  while len(todo):
    n = lengths[todo] // 2
    width = int(lengths[todo].max())
    steps[todo, :width] = _shuffled_steps(rng, n, n, width)
    todo = todo[_balanced_steps(steps[todo, :width])]
  # Right-align: position c holds step c - (max_len - length).
  source = np.arange(max_len)[None] - (max_len - lengths)[:, None]
  chars = np.take_along_axis(steps, np.maximum(source, 0), axis=1)
  return (source >= 0) & (chars > 0), lengths
