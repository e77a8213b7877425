"""Size formulas: sparse width, random threshold N, and the lower bound (DESIGN §2-6).

H heads, L layers, d target width, k_u UT head width, d_out UT read-out width.
"""

import numbers

from ut.errors import UserError


def _check(num_heads, num_layers, width):
  for name, v in (("H", num_heads), ("L", num_layers), ("d", width)):
    if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
      raise UserError(f"{name}={v!r} must be a positive integer")


def num_strings(num_heads: int, max_len: int) -> int:
  """How many strings over H symbols have length <= max_len."""
  return sum(num_heads**j for j in range(max_len + 1))


def sparse_width(num_heads: int, num_layers: int, width: int) -> int:
  """Width m of the tree-routing UT (DESIGN §3).

  H = 1: (2L + 1) d;  H >= 2: d [(H^{L+1} - 1)/(H - 1) + H (H^L - 1)/(H - 1)].
  """
  _check(num_heads, num_layers, width)
  state_blocks = num_strings(num_heads, num_layers)
  query_blocks = num_heads * num_strings(num_heads, num_layers - 1)
  return width * (state_blocks + query_blocks)


def random_threshold(
    num_heads: int,
    num_layers: int,
    width: int,
    head_width: int | None = None,
    out_width: int | None = None,
    *,
    residual: bool = False,
    shared: bool = False,
) -> int:
  """N, the number of linear conditions on E: a Gaussian UT is exact iff m >= N.

  Attention-only (DESIGN §2): N = 2 k_u (H + ... + H^L) + d_out H^L.
  Per-layer residual (§6): 2 k_u H sum_{l<L} (H+1)^l + d_out (H+1)^L.
  Shared (looped) residual UT, looped target: strings without the identity step,
  2 k_u H sum_{j<L} H^j + d_out sum_{j<=L} H^j.
  """
  _check(num_heads, num_layers, width)
  k = width if head_width is None else head_width
  o = width if out_width is None else out_width
  h, L = num_heads, num_layers
  if not residual:
    return 2 * k * sum(h**l for l in range(1, L + 1)) + o * h**L
  if shared:
    return 2 * k * h * num_strings(h, L - 1) + o * num_strings(h, L)
  return 2 * k * h * sum((h + 1) ** l for l in range(L)) + o * (h + 1) ** L


def lower_bound(num_heads: int, num_layers: int) -> float:
  """Theorem 4.1: attention-matching simulation needs m >= H^L / 2 (H >= 2).

  It holds even for input width d = 1; for H = 1 it is trivial.
  """
  _check(num_heads, num_layers, 1)
  return num_heads**num_layers / 2
