"""Gaussian random universal transformers (DESIGN §4).

Shape glossary: H heads, L layers, m UT width, k_u head width, d_out read-out
width, Lp = 1 (shared across layers) or L (per layer).

R_Q, R_K (Lp, H, m, k_u), R_V (Lp, H, m, m) and U (m, d_out) are i.i.d. N(0, 1/m).
For m >= N (see `bounds.random_threshold`) such a UT simulates every target of
its class almost surely; `compile.compile_random` finds E by least squares.
"""

import numpy as np

from ut.core import targets


def make_gaussian_ut(
    num_heads: int,
    num_layers: int,
    m: int,
    head_width: int,
    seed: int,
    *,
    out_width: int | None = None,
    shared: bool = False,
    dtype: np.typing.DTypeLike = np.float64,
) -> dict[str, np.ndarray]:
  """Returns dict(wq, wk, wv, unembed) for `transformer.forward`."""
  targets.check_positive(H=num_heads, L=num_layers, m=m, k_u=head_width)
  targets.check_seed(seed)
  out_width = head_width if out_width is None else out_width
  rng = np.random.default_rng(seed)
  lp = 1 if shared else num_layers
  std = 1.0 / np.sqrt(m)
  draw = lambda *shape: (rng.standard_normal(shape) * std).astype(dtype)
  return dict(
      wq=draw(lp, num_heads, m, head_width),
      wk=draw(lp, num_heads, m, head_width),
      wv=draw(lp, num_heads, m, m),
      unembed=draw(m, out_width),
  )
