"""Task data for training and evaluation: one adapter per task (DESIGN §7).

Shape glossary: B batch, T tokens.

A batch is dict(tokens (B, T) int32, labels (B, T) int32, mask (B, T) bool):
labels are -1 where no loss is taken; mask marks the positions that count for
accuracy (Dyck: the '?' position; k-hop: positions whose label is a letter).
Data is a pure function of (task config, seed): training batch s uses the seed
stream (seed, 0, s) and evaluation the disjoint stream (seed, 1). Dyck has
fixed held-out sets instead (Zhong & Andreas's protocol, DESIGN §7; `Dyck`):
a validation set, scored during training, and a test set, each drawn once
from a stream that does not depend on the run's seed, and never trained on.
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
  # Every label sits at the last position (Dyck's '?' query): training and
  # held-out scoring need the last position's logits only.
  labels_last_only: bool = False
  # The token that pads rows on the left (Dyck's PAD); -1: rows are not padded.
  left_pad: int = -1


class Dyck:
  """Dyck-1 with a '?' query at the last position (ut/training/tasks/dyck.py).

  Held-out sets: a validation set of cfg.valid_num strings of the mix and a
  test set of cfg.test_num (none when 0), drawn once from the streams
  (cfg.valid_seed, 3) and (cfg.test_seed, 2), whatever the run's seed. They
  are independent draws, so they share some strings (mostly short ones).
  Every training batch redraws each of its strings that is in either set
  (`dyck.generate_tokens(..., exclude=...)`), so no held-out string is
  trained on. Configs recorded without these fields have no fixed sets:
  evaluation then draws from the seed stream (seed, 1).
  """

  SPLITS = {"valid": 3, "test": 2}  # Split -> the second entry of its stream.

  def __init__(self, cfg):
    if cfg.mix not in dyck.MIXES:
      raise UserError(f"unknown Dyck mix {cfg.mix!r}; use one of {dyck.MIXES}")
    self.cfg = cfg
    self.info = TaskInfo(
        dyck.VOCAB_SIZE,
        cfg.max_len + 1,
        dyck.NUM_CLASSES,
        labels_last_only=True,
        left_pad=dyck.PAD,
    )
    self.sets = {}
    for split, stream in self.SPLITS.items():
      num, seed = cfg.get(f"{split}_num", 0), cfg.get(f"{split}_seed", 0)
      for field, value in ((f"{split}_num", num), (f"{split}_seed", seed)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
          raise UserError(f"config.data.{field}={value!r}; use an integer >= 0")
      if num:
        self.sets[split] = dyck.generate_tokens(
            num, cfg.max_len, cfg.mix, stream_seed(seed, stream)
        )
    self.exclude = (
        dyck.key_set(*(t for t, _ in self.sets.values())) if self.sets else None
    )

  def batch(self, num, seed):
    """num strings of the stream `seed`, none of them a held-out string."""
    tokens, labels = dyck.generate_tokens(
        num, self.cfg.max_len, self.cfg.mix, seed, exclude=self.exclude
    )
    return self._pack(tokens, labels)

  def held_out(self, split):
    """The fixed 'valid' or 'test' set as one batch; None when there is none."""
    if split not in self.SPLITS:
      raise UserError(
          f"unknown held-out split {split!r}; use one of "
          f"{', '.join(self.SPLITS)}"
      )
    if split not in self.sets:
      return None
    return self._pack(*self.sets[split])

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
      if ch not in "()":  # even on a line too long to score.
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

  def breakdown(self, batch, predictions_BxT):
    """`dyck.breakdown` of a packed batch's query predictions, and the
    counting baseline's on the same strings: dict(model=..., counting=...)."""
    texts = dyck.decode(np.asarray(batch["tokens"]))
    labels_B = np.asarray(batch["labels"])[:, -1]
    return dict(
        model=dyck.breakdown(
            texts,
            labels_B,
            np.asarray(predictions_BxT)[:, -1],
            self.cfg.max_len,
        ),
        counting=dyck.breakdown(
            texts, labels_B, dyck.counting_baseline(texts), self.cfg.max_len
        ),
    )

  def describe(self, logits_row, batch_row):
    del batch_row
    return {
        "balanced_prob": float(_softmax(logits_row[-1])[1]),
        "prediction": int(np.argmax(logits_row[-1])),
    }


class KHop:
  """k-hop induction heads (ut/training/tasks/khop.py): fixed k, or a range with a hop token."""

  def __init__(self, cfg):
    self.cfg = cfg
    self.k = tuple(cfg.k) if isinstance(cfg.k, (tuple, list)) else int(cfg.k)
    self.k_range = self.k if isinstance(self.k, tuple) else None
    k_max = self.k_range[1] if self.k_range else None
    n = cfg.length + (1 if self.k_range else 0)
    self.info = TaskInfo(
        khop.vocab_size(cfg.alphabet, k_max), n, khop.num_classes(cfg.alphabet)
    )

  def batch(self, num, seed):
    tokens, labels, _ = khop.generate(
        num, self.cfg.length, self.cfg.alphabet, self.k, seed
    )
    return self._pack(tokens, labels)

  def _pack(self, tokens, labels):
    mask = (labels >= 0) & (labels < self.cfg.alphabet)
    return dict(
        tokens=tokens.astype(np.int32),
        labels=labels.astype(np.int32),
        mask=mask,
    )

  def encode_example(self, obj, max_len):
    """{"text": "abcab", "k": 2, "label": "__a_b"} -> one row (no padding)."""
    text, label = obj.get("text"), obj.get("label")
    if not isinstance(text, str) or not text:
      raise UserError(
          'each k-hop line needs "text": a non-empty string of letters'
      )
    k = obj.get("k", self.k if isinstance(self.k, int) else None)
    if not isinstance(k, int) or isinstance(k, bool):
      raise UserError('each k-hop line needs an integer "k"')
    if self.k_range:
      if not self.k_range[0] <= k <= self.k_range[1]:
        raise UserError(f"k={k} is outside the trained range {self.k_range}")
    elif k != self.k:
      raise UserError(f"k={k} but this model was trained for k={self.k} only")
    try:  # Characters first: a bad one is an error even on a too-long line.
      tokens = khop.encode(
          text,
          k if self.k_range else None,
          alphabet=self.cfg.alphabet,
          k_range=self.k_range,
      )
    except ValueError as e:
      raise UserError(str(e)) from None
    if len(tokens) > max_len:
      raise TooLong(len(tokens), max_len)
    if label is None:
      labels = khop.hop(
          khop.encode(text, None, alphabet=self.cfg.alphabet),
          k,
          alphabet=self.cfg.alphabet,
      )
      if self.k_range:
        labels = np.concatenate([[khop.IGNORE], labels])
    else:
      if not isinstance(label, str) or len(label) != len(text):
        raise UserError(
            f'"label" must be a string with one character per text '
            f"character ({len(text)}), got {label!r}"
        )
      try:
        labels = khop.encode_label(
            label, self.cfg.alphabet, k_range=self.k_range
        )
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
    super().__init__(
        f"sequence of {length} tokens exceeds the model's position "
        f"table ({max_len}); it was trained on up to {max_len} tokens"
    )
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


def train_batch(config, task, step: int) -> dict:
  """The training batch of `step` (0-based): config.train.batch_size strings
  from the seed stream (seed, 0, step), a pure function of the two."""
  return task.batch(config.train.batch_size, stream_seed(config.seed, 0, step))
