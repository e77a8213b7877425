"""Trivial predictors of k-hop, scored like a model: on the run's held-out
test strings (`held_out.eval_batches(config, task, "test")`), over the positions
whose label is a letter.

  copy      predict the current letter x_i
  last_n    for n = 1, 2, 3: the most frequent label of a scored position
            given the letters x_{i-n+1} .. x_i (fewer at the start of a
            string), counted on training strings (`data.train_batch`) and
            looked up on the test strings. Fitted to scored positions only,
            it is the best any predictor from those letters can do there.

A trained model at one of these numbers has learnt nothing about hops.
"""

import numpy as np

from ut.errors import UserError
from ut.training import data as data_lib
from ut.training import held_out

CONTEXTS = (1, 2, 3)


def _stack(batches):
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _keys(tokens_BxT, n, alphabet):
  """An integer per position naming its last n letters (`alphabet` where a
  string has fewer)."""
  base = alphabet + 1
  keys = np.zeros(tokens_BxT.shape, np.int64)
  for j in range(n):
    shifted = np.full(tokens_BxT.shape, alphabet, np.int64)
    shifted[:, j:] = tokens_BxT[:, : tokens_BxT.shape[1] - j]
    keys = keys * base + shifted
  return keys


def baselines(config, train_strings=20000):
  """{copy, last_1, last_2, last_3: accuracy} and `scored` (positions), on the
  test strings of config's run (a fixed-k configs/khop.py config)."""
  if config.task != "khop":
    raise UserError(f"k-hop baselines need a k-hop config; got {config.task!r}")
  if not isinstance(config.data.k, int):
    raise UserError(
        f"k-hop baselines need a fixed k; got k={tuple(config.data.k)}"
    )
  task = data_lib.make_task(config)
  alphabet = config.data.alphabet
  test = _stack(held_out.eval_batches(config, task, "test"))
  batches, have, step = [], 0, 0
  while have < train_strings:
    batches.append(data_lib.train_batch(config, task, step))
    have += len(batches[-1]["tokens"])
    step += 1
  fit = _stack(batches)
  scored = test["mask"]
  out = dict(
      copy=float(np.mean(test["tokens"][scored] == test["labels"][scored])),
      scored=int(scored.sum()),
      train_strings=have,
  )
  classes = task.info.num_classes
  for n in CONTEXTS:
    fit_keys = _keys(fit["tokens"], n, alphabet)[fit["mask"]]
    counts = np.bincount(
        fit_keys * classes + fit["labels"][fit["mask"]],
        minlength=(alphabet + 1) ** n * classes,
    ).reshape(-1, classes)
    best = counts.argmax(-1)
    pred = best[_keys(test["tokens"], n, alphabet)]
    out[f"last_{n}"] = float(np.mean(pred[scored] == test["labels"][scored]))
  return out
