"""The trivial k-hop predictors against a plain-Python count."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from configs import khop as khop_config
from ut.errors import UserError
from ut.experiments import khop_baselines
from ut.training import data as data_lib
from ut.training import held_out


def _python_baselines(config, train_strings):
  """The same predictors, one position at a time with dictionaries."""
  task = data_lib.make_task(config)
  rows, step = [], 0
  while len(rows) < train_strings:
    b = data_lib.train_batch(config, task, step)
    rows += list(zip(b["tokens"], b["labels"], b["mask"]))
    step += 1
  test = [
      r
      for b in held_out.eval_batches(config, task, "test")
      for r in zip(b["tokens"], b["labels"], b["mask"])
  ]
  out = {}
  copy = [t[i] == l[i] for t, l, m in test for i in range(len(t)) if m[i]]
  out["copy"] = np.mean(copy)
  for n in khop_baselines.CONTEXTS:
    context = lambda t, i: tuple(int(x) for x in t[max(0, i - n + 1) : i + 1])
    counts = collections.defaultdict(collections.Counter)
    for t, l, m in rows:
      for i in range(len(t)):
        if m[i]:
          counts[context(t, i)][int(l[i])] += 1
    hits = []
    for t, l, m in test:
      for i in range(len(t)):
        if m[i]:
          seen = counts.get(context(t, i))
          # Ties: the smallest label, as argmax picks; unseen: label 0.
          best = (
              min(c for c, v in seen.items() if v == max(seen.values()))
              if seen
              else 0
          )
          hits.append(best == l[i])
    out[f"last_{n}"] = np.mean(hits)
  return out


class KhopBaselinesTest(parameterized.TestCase):

  @parameterized.parameters(1, 2, 3)
  def test_matches_a_python_count(self, k):
    config = khop_config.get_config(f"k={k},length=12,seed=3")
    config.eval.num = 40
    got = khop_baselines.baselines(config, train_strings=300)
    want = _python_baselines(config, 300)
    for key, value in want.items():
      self.assertAlmostEqual(got[key], value, msg=key)
    self.assertGreater(got["scored"], 0)

  def test_needs_a_fixed_k(self):
    with self.assertRaisesRegex(UserError, "fixed k"):
      khop_baselines.baselines(khop_config.get_config("k_max=3"))


if __name__ == "__main__":
  absltest.main()
