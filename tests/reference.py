"""A plain numpy reference of the target transformer, written for the tests.

It follows DESIGN §1 literally, one example, layer and head at a time, and shares
no code with `ut`.
"""

import numpy as np


def softmax(s):
  s = s - s.max(axis=-1, keepdims=True)
  e = np.exp(s)
  return e / e.sum(axis=-1, keepdims=True)


def target_forward(w, x, *, causal, residual):
  """w: dict of numpy arrays wq, wk (L,H,d,k), wv (L,H,d,kv), wo (L,H,kv,d), wu.

  x: (B, n, d). Returns (B, n, d_out) in float64.
  """
  wq, wk, wv, wo = (
      np.asarray(w[k], np.float64) for k in ("wq", "wk", "wv", "wo")
  )
  wu = np.asarray(w["wu"], np.float64) if "wu" in w else np.eye(wq.shape[2])
  num_layers, num_heads, _, k = wq.shape
  outs = []
  for xb in np.asarray(x, np.float64):
    n = xb.shape[0]
    for l in range(num_layers):
      total = np.zeros_like(xb)
      for h in range(num_heads):
        scores = (xb @ wq[l, h]) @ (xb @ wk[l, h]).T / np.sqrt(k)
        if causal:
          scores = np.where(np.tril(np.ones((n, n))) > 0, scores, -np.inf)
        total += softmax(scores) @ xb @ wv[l, h] @ wo[l, h]
      xb = xb + total if residual else total
    outs.append(xb @ wu)
  return np.stack(outs)


def random_target(
    rng,
    *,
    num_heads,
    num_layers,
    width,
    head_width=None,
    value_width=None,
    out_width=None,
    looped=False,
):
  """Gaussian weights drawn with numpy (independent of ut.core.targets.init)."""
  d = width
  k = head_width or d
  kv = value_width or d
  lp = 1 if looped else num_layers
  shape = lambda *s: (lp, num_heads) + s
  w = {
      "wq": rng.standard_normal(shape(d, k)) / np.sqrt(d),
      "wk": rng.standard_normal(shape(d, k)) / np.sqrt(d),
      "wv": rng.standard_normal(shape(d, kv)) / np.sqrt(d),
      "wo": rng.standard_normal(shape(kv, d)) / np.sqrt(kv * num_heads),
  }
  if looped:
    w = {key: np.repeat(a, num_layers, axis=0) for key, a in w.items()}
  if out_width:
    w["wu"] = rng.standard_normal((d, out_width)) / np.sqrt(d)
  return w
