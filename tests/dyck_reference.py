"""Zhong & Andreas's Dyck-1 generator, written for the tests.

It follows the definition in ut/training/tasks/dyck.py's docstring, one string
at a time in plain Python (recursion for the grammar), independently of the
vectorised module; with the exact law of the grammar and a two-sample test.
"""

import collections
import itertools

import numpy as np
from scipy import stats

from ut.training.tasks import dyck_mixes

# A chi-square statistic this far out (p < 1e-6) fails a test.
P_FAIL = 1e-6


# ----------------------------------------------------------------- reference


def ref_balanced(text):
  while "()" in text:
    text = text.replace("()", "")
  return not text


def ref_grammar(t, r):
  if t == 1:
    return "()"
  if r.random() < 0.5:
    return "(" + ref_grammar(t - 1, r) + ")"
  u = r.randint(1, t - 1)
  return ref_grammar(u, r) + ref_grammar(t - u, r)


def ref_geometric(r, p):
  n = 1
  while r.random() >= p:
    n += 1
  return n


def ref_za(r, max_len, p=dyck_mixes.ZA_GEOMETRIC_P):
  """One string of the 'za' mix, step by step as the definition reads."""
  if r.random() < 1 / 3:
    return "".join(r.choice("()") for _ in range(r.randint(1, max_len)))
  s = list(ref_grammar(r.randint(1, max_len // 2), r))
  if r.random() < 0.5:
    return "".join(s)
  code = r.randrange(4)
  if code & 1:
    for _ in range(ref_geometric(r, p)):
      i, j = r.randrange(len(s)), r.randrange(len(s))
      s[i], s[j] = s[j], s[i]
  if code & 2:
    flips = ref_geometric(r, p) * (2 if r.random() < 2 / 3 else 1)
    for _ in range(flips):
      i = r.randrange(len(s))
      s[i] = "(" if s[i] == ")" else ")"
  return "".join(s)


def exact_grammar(t):
  """{word: probability} of the grammar's B(t), by its recursion."""
  if t == 1:
    return {"()": 1.0}
  out = collections.defaultdict(float)
  for w, p in exact_grammar(t - 1).items():
    out["(" + w + ")"] += 0.5 * p
  for u in range(1, t):
    for (a, pa), (b, pb) in itertools.product(
        exact_grammar(u).items(), exact_grammar(t - u).items()
    ):
      out[a + b] += 0.5 / (t - 1) * pa * pb
  return dict(out)


def two_sample_p(a_counts, b_counts):
  """p-value of a chi-square test that two samples come from one law."""
  cats = sorted(set(a_counts) | set(b_counts))
  a = np.array([a_counts.get(c, 0) for c in cats], float)
  b = np.array([b_counts.get(c, 0) for c in cats], float)
  k1, k2 = np.sqrt(b.sum() / a.sum()), np.sqrt(a.sum() / b.sum())
  chi2 = float(((k1 * a - k2 * b) ** 2 / (a + b)).sum())
  return stats.chi2.sf(chi2, len(cats) - 1)
