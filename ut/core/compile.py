"""Compilers: target -> program (E, read-out) for a fixed UT (DESIGN §2-4, §6).

Shape glossary: L layers, H heads, d target width, k_u UT head width, m UT width,
N number of linear conditions, P number of head strings of one length.

A program is dict(embed=E (d, m), readout=W (d, d_out)): the UT computes
UT(X, E) = Z_L U W, so the target's own read-out W travels with E.

For a string p of heads, C_p = V[1,p_1] ... V[j,p_j] (d x d) and R_p is the same
product of the UT's R_V. The conditions (for every layer l, head h, |p| = l-1,
and every |p| = L)
  (Q) E R_p R_Q[l,h] = sqrt(k_u) C_p B[l,h] J,  (K) E R_p R_K[l,h] = C_p J,
  (O) E R_p U = C_p
are linear in E: E A = Y with A (m, N), Y (d, N). With residual connections the
strings run over {identity, 1..H} (DESIGN §6).
"""

import dataclasses
import time
import warnings

import numpy as np

from ut.core import bounds
from ut.core import targets as targets_lib
from ut.core.constructions import gaussian
from ut.core.constructions import sparse
from ut.errors import UserError


@dataclasses.dataclass(frozen=True)
class CompileReport:
  construction: str
  m: int
  num_conditions: int  # N (random) or the number of filled blocks (sparse)
  cond: float  # condition number of A; nan for sparse
  rel_residual: float  # ||E A - Y|| / ||Y||; 0 for sparse
  exact: bool
  seconds: float


def _program(embed, target):
  return dict(embed=embed, readout=np.asarray(target.wu, np.float64))


def compile_sparse(
    ut: sparse.SparseUT, target: targets_lib.Target
) -> tuple[dict[str, np.ndarray], CompileReport]:
  """Fills the blocks of E for the tree-routing UT (DESIGN §3)."""
  start = time.perf_counter()
  h, num_layers, d = target.num_heads, target.num_layers, target.width
  if (h, num_layers, d) != (ut.num_heads, ut.num_layers, ut.width):
    raise UserError(
        f"the sparse UT was built for (H, L, d) = ({ut.num_heads}, "
        f"{ut.num_layers}, {ut.width}) but the target has ({h}, "
        f"{num_layers}, {d}); build it with make_sparse_ut{(h, num_layers, d)}"
    )
  if target.residual and not target.looped:
    raise UserError(
        "the sparse UT simulates residual targets exactly only when they are "
        "looped (same weights in every layer); this residual target's layers "
        "differ: use --config.ut=random (a per-layer Gaussian UT with residuals "
        "is exact for any residual target), or a looped target"
    )
  b_all = targets_lib.bilinear_forms(target)
  v_all = targets_lib.value_maps(target)
  names = sparse.block_names(h, num_layers)
  # E = blocks.reshape(d, -1), block by block: blocks[:, i] is names[i]'s.
  blocks = np.zeros((d, len(names), d))
  c = {(): np.eye(d)}
  for j in range(1, num_layers + 1):
    for s in [s for s in c if len(s) == j - 1]:
      for g in range(h):
        c[s + (g,)] = c[s] @ v_all[j - 1, g]  # C_{s.g} = C_s V[|s|+1, g]
  for i, name in enumerate(names):
    if name[0] == "s":
      blocks[:, i] = c[name[1]]
    else:
      _, head, s = name
      blocks[:, i] = np.sqrt(d) * c[s] @ b_all[len(s), head]
  embed = blocks.reshape(d, len(names) * d)
  report = CompileReport(
      "sparse",
      ut.m,
      len(names),
      float("nan"),
      0.0,
      True,
      time.perf_counter() - start,
  )
  return _program(embed, target), report


def _right_products(rv_seq, t_mxw):
  """All R[1,p_1] ... R[j,p_j] t for rv_seq = [R[1], ..., R[j]], each (a, m, m).

  Returns (a^j, m, w), string index = p_1 a^{j-1} + ... + p_j (p_1 most significant).
  """
  out = t_mxw[None]
  for rv in reversed(rv_seq):
    out = np.matmul(rv[:, None], out[None]).reshape(-1, *t_mxw.shape)
  return out


def _left_products(v_seq, d):
  """All V[1,p_1] ... V[j,p_j], in the order of `_right_products`: (a^j, d, d)."""
  out = np.eye(d)[None]
  for v in v_seq:
    out = np.matmul(out[:, None], v[None]).reshape(-1, d, d)
  return out


def _with_identity(stack, residual):
  """Prepends the residual 'head' (identity) to a (H, w, w) stack."""
  if not residual:
    return stack
  return np.concatenate([np.eye(stack.shape[-1])[None], stack], axis=0)


def linear_system(
    ut: dict[str, np.ndarray], target: targets_lib.Target
) -> tuple[np.ndarray, np.ndarray]:
  """Builds A (m, N) and Y (d, N) of the conditions (Q), (K), (O)."""
  wq, wk, wv, unembed = (
      np.asarray(ut[key], np.float64) for key in ("wq", "wk", "wv", "unembed")
  )
  h, num_layers, d = target.num_heads, target.num_layers, target.width
  lp, hu, m, ku = wq.shape
  if hu != h:
    raise UserError(
        f"the UT has H={hu} heads but the target has H={h}; build the "
        f"UT with num_heads={h}"
    )
  if lp not in (1, num_layers):
    raise UserError(
        f"the UT has {lp} weight layers but the target has L="
        f"{num_layers}; build it with num_layers={num_layers}"
    )
  if ku < d:
    raise UserError(
        f"k_u={ku} is smaller than the target width d={d}; the "
        f"conditions need k_u >= d (e.g. k_u={d})"
    )
  if unembed.shape[1] != d:
    raise UserError(
        f"the UT read-out U has width {unembed.shape[1]}; it must "
        f"equal the target width d={d}"
    )
  residual = target.residual
  shared = lp == 1
  if residual and shared and not target.looped:
    raise UserError(
        "a shared (looped) residual UT simulates only looped residual "
        "targets; this target's layers differ: use a per-layer "
        "Gaussian UT (shared=False)"
    )
  b_all = targets_lib.bilinear_forms(target)
  v_all = targets_lib.value_maps(target)
  j_mat = np.eye(d, ku)
  rv = lambda layer: wv[layer if not shared else 0]
  cols, rhs = [], []

  def add(r_pxmxw, y_pxdxw):
    cols.append(r_pxmxw.transpose(1, 0, 2).reshape(m, -1))
    rhs.append(y_pxdxw.transpose(1, 0, 2).reshape(d, -1))

  if residual and shared:
    # Looped target: a string's value depends only on its non-identity steps,
    # so the conditions run over strings over {1..H} of every length.
    q_lengths = [(j, 0) for j in range(num_layers)]
    o_lengths = list(range(num_layers + 1))
    use_identity = False
  else:
    q_lengths = [(l, l) for l in range(num_layers)]  # layer l+1, |p| = l
    o_lengths = [num_layers]
    use_identity = residual
  for length, layer in q_lengths:
    rv_seq = [_with_identity(rv(i), use_identity) for i in range(length)]
    c_p = _left_products(
        [_with_identity(v_all[i], use_identity) for i in range(length)], d
    )
    lq = layer if not shared else 0
    for head in range(h):
      t = np.concatenate([wq[lq, head], wk[lq, head]], axis=1)
      r = _right_products(rv_seq, t)
      add(r[..., :ku], np.sqrt(ku) * c_p @ b_all[layer, head] @ j_mat)
      add(r[..., ku:], c_p @ j_mat)
  for length in o_lengths:
    rv_seq = [_with_identity(rv(i), use_identity) for i in range(length)]
    c_p = _left_products(
        [_with_identity(v_all[i], use_identity) for i in range(length)], d
    )
    add(_right_products(rv_seq, unembed), c_p)
  return np.concatenate(cols, axis=1), np.concatenate(rhs, axis=1)


def compile_random(
    ut: dict[str, np.ndarray],
    target: targets_lib.Target,
    *,
    exact_tol: float = 1e-9,
) -> tuple[dict[str, np.ndarray], CompileReport]:
  """Least-squares E for a Gaussian UT, in float64 (DESIGN §4).

  Returns (program, CompileReport). When m < N the system is overdetermined: E is
  the least-squares fit, a warning says so, and the report gives the residual.
  """
  start = time.perf_counter()
  a, y = linear_system(ut, target)
  m, n = a.shape
  n_formula = bounds.random_threshold(
      target.num_heads,
      target.num_layers,
      target.width,
      ut["wq"].shape[-1],
      target.width,
      residual=target.residual,
      shared=target.residual and ut["wq"].shape[0] == 1,
  )
  assert n == n_formula, (n, n_formula)
  if not np.all(np.isfinite(a)):
    raise UserError(
        "the UT's path products overflowed (non-finite A); use a "
        "smaller L or the default N(0, 1/m) scaling"
    )
  # LAPACK's SVD least squares (gelsd), as fast as XLA's on one core up to
  # N of a few thousand, and no compile per shape (XLA compiled one per (m, N):
  # most of the time of a small system, and of every probe of a width search).
  sol, _, _, sing = np.linalg.lstsq(a.T, y.T, rcond=None)
  embed = sol.T
  cond = float(sing[0] / sing[-1]) if sing[-1] > 0 else float("inf")
  rel = float(np.linalg.norm(embed @ a - y) / max(np.linalg.norm(y), 1e-300))
  exact = rel <= exact_tol
  if m < n:
    warnings.warn(
        f"random UT width m={m} is below N={n}: the compiled E is a "
        f"least-squares fit (relative residual {rel:.2e}), not exact",
        stacklevel=2,
    )
  report = CompileReport(
      "random", m, n, cond, rel, exact, time.perf_counter() - start
  )
  return _program(embed, target), report


def smallest_exact_width(
    target: targets_lib.Target,
    *,
    seed: int = 0,
    lo: int = 1,
    hi: int | None = None,
    shared: bool = False,
    exact_tol: float = 1e-9,
) -> tuple[int, int]:
  """Binary search for the smallest m at which the random compiler is exact.

  Each probe draws a Gaussian UT of width m (same seed) and compiles; exactness
  means a relative residual <= exact_tol. Generic targets give m = N.
  Returns (m, number of probes).
  """
  h, num_layers, d = target.num_heads, target.num_layers, target.width
  n = bounds.random_threshold(
      h,
      num_layers,
      d,
      residual=target.residual,
      shared=shared and target.residual,
  )
  hi = n if hi is None else hi
  probes = 0

  def exact(m):
    nonlocal probes
    probes += 1
    ut = gaussian.make_gaussian_ut(h, num_layers, m, d, seed, shared=shared)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      _, report = compile_random(ut, target, exact_tol=exact_tol)
    return report.exact

  while not exact(hi):
    lo, hi = hi + 1, 2 * hi
  while lo < hi:
    mid = (lo + hi) // 2
    if exact(mid):
      hi = mid
    else:
      lo = mid + 1
  return hi, probes
