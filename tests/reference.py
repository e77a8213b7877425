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


def gpt2_layer_norm(x, scale, bias, eps=1e-5):
  mu = x.mean(axis=-1, keepdims=True)
  var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * scale + bias


def gelu_tanh(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def gpt2_forward(p, tokens, num_heads):
  """HF GPT-2 with a linear head, one string and head at a time, float64.

  p: nested dict of numpy arrays in `ut.training.gpt2`'s layout (read here by
  its documented names only); tokens: one string (n,) starting at position
  0, no padding. Returns logits (n, C).
  """
  f = lambda a: np.asarray(a, np.float64)
  blocks = p["blocks"]
  x = f(p["embed"]["token"])[tokens] + f(p["embed"]["position"])[: len(tokens)]
  n, d = x.shape
  k = d // num_heads
  for l in range(f(blocks["ln1"]["scale"]).shape[0]):
    ln1 = gpt2_layer_norm(
        x, f(blocks["ln1"]["scale"][l]), f(blocks["ln1"]["bias"][l])
    )
    qkv = ln1 @ f(blocks["attn"]["qkv"]["kernel"][l]) + f(
        blocks["attn"]["qkv"]["bias"][l]
    )
    q, kk, v = qkv[:, :d], qkv[:, d : 2 * d], qkv[:, 2 * d :]
    heads = np.zeros((n, d))
    for h in range(num_heads):
      cols = slice(h * k, (h + 1) * k)
      out = np.zeros((n, k))
      for i in range(n):  # Query i attends to positions 0..i.
        s = kk[: i + 1, cols] @ q[i, cols] / np.sqrt(k)
        out[i] = softmax(s) @ v[: i + 1, cols]
      heads[:, cols] = out
    x = x + heads @ f(blocks["attn"]["proj"]["kernel"][l]) + f(
        blocks["attn"]["proj"]["bias"][l]
    )
    ln2 = gpt2_layer_norm(
        x, f(blocks["ln2"]["scale"][l]), f(blocks["ln2"]["bias"][l])
    )
    hidden = gelu_tanh(
        ln2 @ f(blocks["mlp"]["fc"]["kernel"][l]) + f(blocks["mlp"]["fc"]["bias"][l])
    )
    x = x + hidden @ f(blocks["mlp"]["proj"]["kernel"][l]) + f(
        blocks["mlp"]["proj"]["bias"][l]
    )
  x = gpt2_layer_norm(x, f(p["ln_f"]["scale"]), f(p["ln_f"]["bias"]))
  return x @ f(p["unembed"])
