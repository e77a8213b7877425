"""Attention maps of a target beside those of UTs compiled from it."""

import warnings

import jax.numpy as jnp
from matplotlib import colors
from matplotlib import figure as figure_lib
from matplotlib.backends import backend_agg
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import transformer
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError
from ut.experiments.threshold import curve


def attention_maps(params, x_BxTxD, *, num_layers, causal, residual=False):
  """Attention matrices of every layer and head: (L, B, H, T, T).

  params as for `transformer.forward`: a target's wq, wk, wv, wo, or a dense
  UT's wq, wk, wv (no wo: V = W) with its program's `embed`. The layers are
  advanced with `transformer.attention_layer`; the maps come from
  `transformer.attention_weights`.
  """
  x = jnp.asarray(x_BxTxD)
  if params.get("embed") is not None:
    x = jnp.einsum(
        "btd,dw->btw", x, params["embed"], precision=transformer.HIGHEST
    )
  maps = []
  for layer in range(num_layers):
    wq, wk, wv, wo = transformer.layer_params(params, layer)
    q_BxHxTxK = jnp.einsum(
        "btw,hwk->bhtk", x, wq, precision=transformer.HIGHEST
    )
    k_BxHxTxK = jnp.einsum(
        "btw,hwk->bhtk", x, wk, precision=transformer.HIGHEST
    )
    maps.append(
        transformer.attention_weights(q_BxHxTxK, k_BxHxTxK, causal=causal)
    )
    out = transformer.attention_layer(x, wq, wk, wv, wo, causal=causal)
    x = x + out if residual else out
  return np.asarray(jnp.stack(maps))


def target_params(target):
  """A `Target` as a `transformer.forward` params dict (no read-out)."""
  return dict(wq=target.wq, wk=target.wk, wv=target.wv, wo=target.wo)


def attention_comparison(target, x_BxTxD, *, seed=0, random_widths=None):
  """Attention maps (L, B, H, T, T) of the target and of UTs compiled from it.

  Returns {name: maps} for "target", the sparse UT (dense form) and Gaussian
  UTs of the given widths (default N and N - 1). For the sparse UT and for a
  random UT with m >= N the maps equal the target's (attention matching,
  DESIGN §2); below N they do not.
  """
  h, num_layers, d = target.num_heads, target.num_layers, target.width
  n = bounds.random_threshold(h, num_layers, d, residual=target.residual)
  sparse_ut = sparse.make_sparse_ut(h, num_layers, d)
  program, _ = compile_lib.compile_sparse(sparse_ut, target)
  models = {
      "target": target_params(target),
      f"sparse UT, m={sparse_ut.m}": dict(
          sparse.to_dense(sparse_ut, np.float64), embed=program["embed"]
      ),
  }
  for m in (n, n - 1) if random_widths is None else random_widths:
    ut = gaussian.make_gaussian_ut(h, num_layers, m, d, seed)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # Below N the fit is inexact by design.
      program, _ = compile_lib.compile_random(ut, target)
    models[f"random UT, m={m} (N={n})"] = dict(ut, embed=program["embed"])
  return {
      name: attention_maps(
          params,
          x_BxTxD,
          num_layers=num_layers,
          causal=target.causal,
          residual=target.residual,
      )
      for name, params in models.items()
  }


def plot_attention(maps, *, layer, head, example=0, path=None):
  """The attention of `layer`, `head` (1-based, DESIGN §1), one column per model.

  maps: {name: (L, B, H, T, T)} as from `attention_comparison`, with "target".
  Top row: the attention matrices; bottom row: |A - A_target| on a log scale,
  titled with its maximum over all layers and heads.
  """
  num_layers, _, num_heads = maps["target"].shape[:3]
  if not (1 <= layer <= num_layers and 1 <= head <= num_heads):
    raise UserError(
        f"layer={layer}, head={head} out of range: the target has "
        f"layers 1..{num_layers} and heads 1..{num_heads}"
    )
  fig = figure_lib.Figure(
      figsize=(3 * len(maps) + 1.5, 6.4), dpi=110, layout="constrained"
  )
  backend_agg.FigureCanvasAgg(fig)
  top, bottom = fig.subplots(2, len(maps), squeeze=False)
  floor = 1e-17  # Exact zeros cannot go on a log scale.
  norm = colors.LogNorm(vmin=1e-16, vmax=1)
  for i, (name, a) in enumerate(maps.items()):
    image = top[i].imshow(a[layer - 1, example, head - 1], vmin=0, vmax=1)
    top[i].set_title(name, fontsize=9)
    diff = np.abs(a - maps["target"])
    if name == "target":
      bottom[i].axis("off")
      continue
    diff_image = bottom[i].imshow(
        np.maximum(diff[layer - 1, example, head - 1], floor),
        norm=norm,
        cmap="magma",
    )
    bottom[i].set_title(
        f"|A - A_target|, max over all\nlayers and heads " f"{diff.max():.1e}",
        fontsize=9,
    )
    bottom[i].set_xlabel("key position")
  top[0].set_ylabel("query position")
  fig.colorbar(image, ax=list(top), shrink=0.8, label="attention")
  if len(maps) > 1:
    fig.colorbar(diff_image, ax=list(bottom), shrink=0.8, label="|difference|")
  fig.suptitle(
      f"attention of layer {layer}, head {head}: target and UTs "
      f"compiled from it"
  )
  curve._save(fig, path)
  return fig
