"""k-hop induction heads (Sanford, Hsu & Telgarsky 2024). Deterministic numpy.

A sequence x_0 .. x_{n-1} over A letters. One hop from position i finds the
last earlier position j < i with x_j == x_i and moves to position j + 1.
hop_k(x)_i is the letter at the position reached after k hops from i (each hop
starting where the previous one ended), or NULL when some hop finds nothing.
k = 1 is the ordinary induction head: "what followed the last time this letter
appeared?".

Shapes and vocabulary:

  B       batch
  n       tokens per row: `length`, or `length + 1` with a hop-count token
  A       alphabet size, 2 <= A <= 26, letters 'a', 'b', ... with ids 0 .. A-1
  NULL    = A, a LABEL class only ('_' in label strings); never an input token
  hop-count token for k: A + 1 + (k - 1) = A + k, for k in 1 .. k_max; the first
          token of a row when a range of k is used, so the model knows k
  IGNORE  = -1, the label at the hop-count position (not scored)
  vocab_size(A, k_max) = A + 1 + k_max input ids (the NULL id stays unused as
          an input so that input and label ids agree); A + 1 with no hop tokens
  num_classes(A) = A + 1 (letters and NULL)

Generated rows have no two equal neighbours: each next letter is uniform among
the other A - 1 letters. User texts given to `encode` may have equal
neighbours; the labels are then just computed by the definition.

Worked examples. In x = "abacab" with k = 1, position 4 holds 'a', whose last
earlier occurrence is position 2, so the hop lands on 3 and reads 'c'. With
k = 2, position 5 ('b', last seen at 1) hops to 2 ('a', last seen at 0) and
then to 1, reading 'b'; every other chain meets a letter with no earlier copy:

>>> x = encode('abacab', None, alphabet=3)
>>> x
array([0, 1, 0, 2, 0, 1], dtype=int32)
>>> decode_label(hop(x, 1, alphabet=3), alphabet=3)
'__b_ca'
>>> decode_label(hop(x, 2, alphabet=3), alphabet=3)
'_____b'
>>> decode_label(hop_batch(x[None], 2, alphabet=3)[0], alphabet=3)
'_____b'
>>> encode_label('__b_ca', alphabet=3)
array([3, 3, 1, 3, 2, 0], dtype=int32)

With a range of k the hop-count token comes first and its label is IGNORE:

>>> encode('abacab', 2, alphabet=3, k_range=(1, 4))
array([5, 0, 1, 0, 2, 0, 1], dtype=int32)
>>> encode_label('_____b', alphabet=3, k_range=(1, 4))
array([-1,  3,  3,  3,  3,  3,  1], dtype=int32)
>>> tokens, labels, ks = generate(2, length=6, alphabet=3, k=(1, 2), seed=0)
>>> tokens.shape, labels.shape, ks.shape, vocab_size(3, 2), num_classes(3)
((2, 7), (2, 7), (2,), 6, 4)
>>> bool(np.all(tokens[:, 0] == 3 + ks)), bool(np.all(labels[:, 0] == IGNORE))
(True, True)
>>> accuracy(np.array([[0, 1, 2]]), np.array([[0, 2, 3]]), alphabet=3)
0.5
"""

from collections.abc import Sequence

import numpy as np

IGNORE = -1
MAX_ALPHABET = 26


def null_id(alphabet: int) -> int:
  """The NULL label id: `alphabet`."""
  return alphabet


def hop_token(alphabet: int, k: int) -> int:
  """The hop-count token for `k`: alphabet + 1 + (k - 1)."""
  return alphabet + 1 + (k - 1)


def vocab_size(alphabet: int, k_max: int | None = None) -> int:
  """Input ids: A letters, the (unused) NULL id, and k_max hop-count tokens."""
  _check_alphabet(alphabet)
  return alphabet + 1 + (k_max or 0)


def num_classes(alphabet: int) -> int:
  """Label classes: A letters and NULL."""
  _check_alphabet(alphabet)
  return alphabet + 1


def _check_alphabet(alphabet: int) -> None:
  if not 2 <= alphabet <= MAX_ALPHABET:
    raise ValueError(
        f"alphabet={alphabet} is out of range; use 2 <= alphabet <= "
        f"{MAX_ALPHABET} (letters a..z)."
    )


def _check_k(k: int) -> None:
  if k < 1:
    raise ValueError(f"k={k} is too small; use k >= 1 hops.")


def _check_k_range(k_range: tuple[int, int]) -> None:
  if len(k_range) != 2 or not 1 <= k_range[0] <= k_range[1]:
    raise ValueError(
        f"k range {tuple(k_range)} is empty or invalid; use (k_min, k_max) "
        "with 1 <= k_min <= k_max."
    )


def _check_letters(x: np.ndarray, alphabet: int) -> None:
  if x.size and (x.min() < 0 or x.max() >= alphabet):
    raise ValueError(
        f"letter ids must lie in [0, {alphabet}) for alphabet={alphabet}; got "
        f"values in [{x.min()}, {x.max()}]. Strip any hop-count token first."
    )


def hop(x: Sequence[int], k: int, *, alphabet: int) -> np.ndarray:
  """Reference hop_k for one sequence of letter ids: int32 (n,), NULL = A."""
  x_n = np.asarray(x)
  _check_alphabet(alphabet)
  _check_k(k)
  _check_letters(x_n, alphabet)
  labels_n = np.full(len(x_n), null_id(alphabet), dtype=np.int32)
  for i in range(len(x_n)):
    position = i
    for _ in range(k):
      earlier = [j for j in range(position) if x_n[j] == x_n[position]]
      if not earlier:
        break
      position = earlier[-1] + 1
    else:
      labels_n[i] = x_n[position]
  return labels_n


def previous_occurrence(x_BxN: np.ndarray, alphabet: int) -> np.ndarray:
  """prev[b, i] = last j < i with x[b, j] == x[b, i], or -1; int32 (B, n)."""
  num, n = x_BxN.shape
  last_seen_BxA = np.full((num, alphabet), -1, dtype=np.int32)
  prev_BxN = np.empty((num, n), dtype=np.int32)
  rows_B = np.arange(num)
  for i in range(n):
    prev_BxN[:, i] = last_seen_BxA[rows_B, x_BxN[:, i]]
    last_seen_BxA[rows_B, x_BxN[:, i]] = i
  return prev_BxN


def hop_batch(x, k, *, alphabet: int) -> np.ndarray:
  """hop_k for a batch (B, n) of letter ids; `k` an int or int array (B,).

  Iterates the map i -> prev[i] + 1 over the previous-occurrence table; a row
  whose chain hits prev = -1 gets NULL. Equals `hop` row by row.
  """
  x_BxN = np.asarray(x)
  _check_alphabet(alphabet)
  if x_BxN.ndim != 2:
    raise ValueError(f"x has shape {x_BxN.shape}; expected (B, n).")
  _check_letters(x_BxN, alphabet)
  k_B = np.broadcast_to(np.asarray(k), (x_BxN.shape[0],))
  if k_B.size:
    _check_k(int(k_B.min()))
  prev_BxN = previous_occurrence(x_BxN, alphabet)
  rows_Bx1 = np.arange(x_BxN.shape[0])[:, None]
  position_BxN = np.broadcast_to(np.arange(x_BxN.shape[1]), x_BxN.shape).copy()
  found_BxN = np.ones(x_BxN.shape, dtype=bool)
  for step in range(int(k_B.max()) if k_B.size else 0):
    active_Bx1 = (step < k_B)[:, None]
    earlier_BxN = prev_BxN[rows_Bx1, position_BxN]
    found_BxN &= ~active_Bx1 | (earlier_BxN >= 0)
    position_BxN = np.where(
        active_Bx1 & found_BxN, earlier_BxN + 1, position_BxN
    )
  letters_BxN = x_BxN[rows_Bx1, position_BxN]
  return np.where(found_BxN, letters_BxN, null_id(alphabet)).astype(np.int32)


def _parse_k(k, k_max: int | None) -> tuple[int, int, bool]:
  """Returns (k_low, k_high, with_hop_token)."""
  if isinstance(k, (tuple, list)):
    _check_k_range(tuple(k))
    k_low, k_high = int(k[0]), int(k[1])
    if k_max is not None and k_high > k_max:
      raise ValueError(
          f"k range {tuple(k)} goes past k_max={k_max}; use k_max >= {k_high} "
          "or a smaller range."
      )
    return k_low, k_high, True
  _check_k(k)
  if k_max is not None:
    raise ValueError(
        f"k_max={k_max} only applies to a k range; pass k=({k}, {k}) to get a "
        "hop-count token for a fixed k."
    )
  return int(k), int(k), False


def generate(
    num: int, length: int, alphabet: int, k, seed: int, k_max: int | None = None
):
  """Returns tokens int32 (num, n), labels int32 (num, n), ks int32 (num,).

  `k` an int: every row uses that k, n = length, no hop-count token.
  `k` a tuple (k_min, k_max): k uniform per row in [k_min, k_max]; the
  hop-count token A + k is prepended (n = length + 1) with label IGNORE.
  `k_max` (ranges only) is the largest k the vocabulary provides for; it
  defaults to the range's upper end and only validates the range.
  """
  _check_alphabet(alphabet)
  if length < 2:
    raise ValueError(f"length={length} is too short; use length >= 2.")
  if num < 0:
    raise ValueError(f"num={num} is negative; use num >= 0.")
  k_low, k_high, with_hop_token = _parse_k(k, k_max)
  rng = np.random.default_rng(seed)
  first_Bx1 = rng.integers(alphabet, size=(num, 1))
  steps_BxL = rng.integers(1, alphabet, size=(num, length - 1))
  x_BxL = (
      np.cumsum(np.concatenate([first_Bx1, steps_BxL], axis=1), axis=1)
      % alphabet
  ).astype(np.int32)
  ks_B = rng.integers(k_low, k_high + 1, size=num).astype(np.int32)
  labels_BxL = hop_batch(x_BxL, ks_B, alphabet=alphabet)
  if not with_hop_token:
    return x_BxL, labels_BxL, ks_B
  tokens_BxN = np.concatenate(
      [hop_token(alphabet, ks_B)[:, None], x_BxL], axis=1
  ).astype(np.int32)
  labels_BxN = np.concatenate(
      [np.full((num, 1), IGNORE, dtype=np.int32), labels_BxL], axis=1
  )
  return tokens_BxN, labels_BxN, ks_B


def _letters_to_ids(text: str, alphabet: int, extra: str = "") -> list[int]:
  allowed = "".join(chr(ord("a") + a) for a in range(alphabet))
  for position, char in enumerate(text):
    if char not in allowed and char not in extra:
      raise ValueError(
          f"character {char!r} at position {position} is not a letter of the "
          f"alphabet {allowed!r}" + (f" or {extra!r}" if extra else "") + "."
      )
  return [null_id(alphabet) if c in extra else ord(c) - ord("a") for c in text]


def encode(
    text: str,
    k: int | None,
    *,
    alphabet: int,
    k_range: tuple[int, int] | None = None,
) -> np.ndarray:
  """Tokens int32 (n,) for a text like 'abcab'.

  With `k_range` = (k_min, k_max) the hop-count token for `k` is prepended
  (1 <= k <= k_max; the vocabulary is `vocab_size(alphabet, k_max)`). Without
  it `k` is not encoded and may be None.
  """
  _check_alphabet(alphabet)
  ids = _letters_to_ids(text, alphabet)
  if k_range is not None:
    _check_k_range(tuple(k_range))
    if k is None or not 1 <= k <= k_range[1]:
      raise ValueError(
          f"k={k} has no hop-count token in k_range={tuple(k_range)}; use "
          f"1 <= k <= {k_range[1]}."
      )
    ids = [hop_token(alphabet, k)] + ids
  return np.array(ids, dtype=np.int32)


def encode_label(
    label: str, alphabet: int, k_range: tuple[int, int] | None = None
) -> np.ndarray:
  """Labels int32 (n,) from a string like '___bc' ('_' is NULL).

  With `k_range` an IGNORE is prepended so the labels line up with `encode`.
  """
  _check_alphabet(alphabet)
  ids = _letters_to_ids(label, alphabet, extra="_")
  if k_range is not None:
    ids = [IGNORE] + ids
  return np.array(ids, dtype=np.int32)


def decode_label(labels, alphabet: int) -> str:
  """Inverse of `encode_label`: letters, '_' for NULL; IGNORE is skipped."""
  chars = []
  for label in np.asarray(labels).reshape(-1):
    label = int(label)
    if label == IGNORE:
      continue
    if label == null_id(alphabet):
      chars.append("_")
    elif 0 <= label < alphabet:
      chars.append(chr(ord("a") + label))
    else:
      raise ValueError(
          f"label {label} is not a letter id, NULL={alphabet} or IGNORE=-1 "
          f"for alphabet={alphabet}."
      )
  return "".join(chars)


def accuracy(pred, labels, alphabet: int) -> float:
  """Accuracy over positions whose label is a letter (0 <= label < A).

  NULL and IGNORE positions are not scored; NaN if no position is a letter.
  """
  pred_BxN, labels_BxN = np.asarray(pred), np.asarray(labels)
  if pred_BxN.shape != labels_BxN.shape:
    raise ValueError(
        f"pred has shape {pred_BxN.shape} but labels have shape "
        f"{labels_BxN.shape}; they must match."
    )
  scored = (labels_BxN >= 0) & (labels_BxN < alphabet)
  if not scored.any():
    return float("nan")
  return float(np.mean(pred_BxN[scored] == labels_BxN[scored]))
