"""Task data for training and evaluation: one adapter per task (DESIGN §7).

Shape glossary: B batch, T tokens.

A batch is dict(tokens (B, T) int32, labels (B, T) int32, mask (B, T) bool):
labels are -1 where no loss is taken; mask marks the positions that count for
accuracy (Dyck: the '?' position; k-hop: positions whose label is a letter).
Data is a pure function of (task config, seed): training batch s uses the seed
stream (seed, 0, s) and evaluation the disjoint stream (seed, 1).
"""

import dataclasses

import numpy as np

from ut.errors import UserError
from ut.training.tasks import dyck
from ut.training.tasks import khop


def stream_seed(*entropy):
  """A 32-bit seed from a SeedSequence path: disjoint streams for train/eval."""
  return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


@dataclasses.dataclass(frozen=True)
class TaskInfo:
  vocab_size: int
  max_len: int
  num_classes: int


class Dyck:
  """Dyck-1 with a '?' query at the last position (ut/training/tasks/dyck.py)."""

  def __init__(self, cfg):
    if cfg.mix not in dyck.MIXES:
      raise UserError(f"unknown Dyck mix {cfg.mix!r}; use one of {dyck.MIXES}")
    self.cfg = cfg
    self.info = TaskInfo(dyck.VOCAB_SIZE, cfg.max_len + 1, dyck.NUM_CLASSES)

  def batch(self, num, seed):
    tokens, labels, _ = dyck.generate(num, self.cfg.max_len, self.cfg.mix, seed)
    return self._pack(tokens, labels)

  def _pack(self, tokens, labels):
    full = np.full(tokens.shape, -1, np.int32)
    full[:, -1] = labels
    mask = np.zeros(tokens.shape, bool)
    mask[:, -1] = True
    return dict(tokens=tokens.astype(np.int32), labels=full, mask=mask)

  def encode_example(self, obj, max_len):
    """A JSONL object {"text": "(()", "label": 0|1} -> one row (padded to max_len)."""
    text = obj.get("text")
    if not isinstance(text, str):
      raise UserError('each Dyck line needs "text": a string of "(" and ")"')
    for i, ch in enumerate(text):  # Characters first: a bad one is an error
      if ch not in "()":           # even on a line too long to score.
        raise UserError(f"character {ch!r} at position {i} is not '(' or ')'")
    if len(text) + 1 > max_len:
      raise TooLong(len(text) + 1, max_len)
    tokens = dyck.encode([text], max_len - 1)
    label = obj.get("label")
    if label is None:
      label = int(dyck.is_balanced(text))
    if label not in (0, 1, True, False):
      raise UserError(f'"label" must be 0 or 1 (1 = balanced), got {label!r}')
    return self._pack(tokens, np.array([int(label)]))

  def describe(self, logits_row, batch_row):
    del batch_row
    return {"balanced_prob": float(_softmax(logits_row[-1])[1]),
            "prediction": int(np.argmax(logits_row[-1]))}


class KHop:
  """k-hop induction heads (ut/training/tasks/khop.py): fixed k, or a range with a hop token."""

  def __init__(self, cfg):
    self.cfg = cfg
    self.k = tuple(cfg.k) if isinstance(cfg.k, (tuple, list)) else int(cfg.k)
    self.k_range = self.k if isinstance(self.k, tuple) else None
    k_max = self.k_range[1] if self.k_range else None
    n = cfg.length + (1 if self.k_range else 0)
    self.info = TaskInfo(khop.vocab_size(cfg.alphabet, k_max), n,
                         khop.num_classes(cfg.alphabet))

  def batch(self, num, seed):
    tokens, labels, _ = khop.generate(num, self.cfg.length, self.cfg.alphabet,
                                      self.k, seed)
    return self._pack(tokens, labels)

  def _pack(self, tokens, labels):
    mask = (labels >= 0) & (labels < self.cfg.alphabet)
    return dict(tokens=tokens.astype(np.int32), labels=labels.astype(np.int32),
                mask=mask)

  def encode_example(self, obj, max_len):
    """{"text": "abcab", "k": 2, "label": "__a_b"} -> one row (no padding)."""
    text, label = obj.get("text"), obj.get("label")
    if not isinstance(text, str) or not text:
      raise UserError('each k-hop line needs "text": a non-empty string of letters')
    k = obj.get("k", self.k if isinstance(self.k, int) else None)
    if not isinstance(k, int) or isinstance(k, bool):
      raise UserError('each k-hop line needs an integer "k"')
    if self.k_range:
      if not self.k_range[0] <= k <= self.k_range[1]:
        raise UserError(f"k={k} is outside the trained range {self.k_range}")
    elif k != self.k:
      raise UserError(f"k={k} but this model was trained for k={self.k} only")
    try:  # Characters first: a bad one is an error even on a too-long line.
      tokens = khop.encode(text, k if self.k_range else None,
                           alphabet=self.cfg.alphabet, k_range=self.k_range)
    except ValueError as e:
      raise UserError(str(e)) from None
    if len(tokens) > max_len:
      raise TooLong(len(tokens), max_len)
    if label is None:
      labels = khop.hop(khop.encode(text, None, alphabet=self.cfg.alphabet), k,
                        alphabet=self.cfg.alphabet)
      if self.k_range:
        labels = np.concatenate([[khop.IGNORE], labels])
    else:
      if not isinstance(label, str) or len(label) != len(text):
        raise UserError(f'"label" must be a string with one character per text '
                        f'character ({len(text)}), got {label!r}')
      try:
        labels = khop.encode_label(label, self.cfg.alphabet, k_range=self.k_range)
      except ValueError as e:
        raise UserError(f"label: {e}") from None
    return self._pack(tokens[None], np.asarray(labels)[None])

  def describe(self, logits_row, batch_row):
    pred = np.argmax(logits_row, axis=-1)
    start = 1 if self.k_range else 0
    return {"prediction": khop.decode_label(pred[start:], self.cfg.alphabet)}


class TooLong(UserError):
  """A raw example longer than the model's position table."""

  def __init__(self, length, max_len):
    super().__init__(f"sequence of {length} tokens exceeds the model's position "
                     f"table ({max_len}); it was trained on up to {max_len} tokens")
    self.length, self.max_len = length, max_len


def _softmax(x):
  e = np.exp(x - np.max(x))
  return e / e.sum()


TASKS = {"dyck": Dyck, "khop": KHop}


def make_task(config):
  """The task adapter for config.task with its config.data."""
  if config.task not in TASKS:
    raise UserError(f"unknown task {config.task!r}; use one of {sorted(TASKS)}")
  try:  # The generators check their settings: try them on two examples.
    task = TASKS[config.task](config.data)
    task.batch(2, 0)
  except (ValueError, TypeError) as e:
    raise UserError(f"config.data of task {config.task}: {e}") from None
  return task
