"""Target transformers: the attention-only class the theory is about (DESIGN §1).

Shape glossary: L layers, H heads, d width, k query/key width, kv value width,
d_out read-out width, B batch, T tokens.

A target is a `Target` pytree of stacked weights

  wq, wk: (L, H, d, k);  wv: (L, H, d, kv);  wo: (L, H, kv, d);  wu: (d, d_out)

with static flags `causal` and `residual`. It computes

  X_0 = X,  X_l = [X_{l-1} +] sum_h softmax(mask(X wq_h (X wk_h)^T / sqrt(k))) X wv_h wo_h,
  T(X) = X_L @ wu.

A looped target has equal weights in every layer. On disk a target is an `.npz`
with exactly these keys (optional ones have the defaults shown):

  wq, wk (L, H, d, k); wv (L, H, d, kv); wo (L, H, kv, d);
  wu (d, d_out) = identity;  causal () = 1;  residual () = 0.
"""

from collections.abc import Sequence
import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from ut.core import transformer
from ut.errors import UserError

REQUIRED_KEYS = ("wq", "wk", "wv", "wo")
OPTIONAL_KEYS = ("wu", "causal", "residual")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Target:
  wq: jax.Array
  wk: jax.Array
  wv: jax.Array
  wo: jax.Array
  wu: jax.Array
  causal: bool = dataclasses.field(default=True, metadata=dict(static=True))
  residual: bool = dataclasses.field(default=False, metadata=dict(static=True))

  @property
  def num_layers(self) -> int:
    return self.wq.shape[-4]

  @property
  def num_heads(self) -> int:
    return self.wq.shape[-3]

  @property
  def width(self) -> int:
    return self.wq.shape[-2]

  @property
  def head_width(self) -> int:
    return self.wq.shape[-1]

  @property
  def out_width(self) -> int:
    return self.wu.shape[-1]

  @property
  def looped(self) -> bool:
    """True when every layer has the same weights (checked on the values)."""
    return all(
        bool(np.all(np.asarray(w)[:1] == np.asarray(w)))
        for w in (self.wq, self.wk, self.wv, self.wo)
    )

  def astype(self, dtype: jax.typing.DTypeLike) -> "Target":
    return jax.tree.map(lambda a: np.asarray(a, dtype), self)


def check_grid(grid: Sequence[Sequence[int]]) -> None:
  """Raises UserError unless `grid` is a non-empty sequence of (H, L, d)."""
  if not grid:
    raise UserError("grid is empty; give (H, L, d) entries, e.g. ((1, 2, 4),)")
  for entry in grid:
    if not isinstance(entry, (tuple, list)) or len(entry) != 3:
      raise UserError(
          f"grid entry {entry!r} must be (H, L, d); a grid of one "
          f"entry is written ((1, 2, 4),)"
      )
    check_positive(H=entry[0], L=entry[1], d=entry[2])


def check_seed(seed: int, name: str = "seed") -> None:
  """Raises UserError unless `seed` is a non-negative integer (numpy's rule)."""
  if (
      isinstance(seed, bool)
      or not isinstance(seed, (int, np.integer))
      or seed < 0
  ):
    raise UserError(
        f"{name}={seed!r} must be a non-negative integer, e.g. {name}=0"
    )


def check_positive(**sizes: int) -> None:
  """Raises UserError unless every named size is a positive integer."""
  for name, value in sizes.items():
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < 1
    ):
      raise UserError(
          f"{name}={value!r} must be a positive integer, e.g. {name}=2"
      )


def init(
    key: jax.Array,
    *,
    num_heads: int,
    num_layers: int,
    width: int,
    head_width: int | None = None,
    value_width: int | None = None,
    out_width: int | None = None,
    causal: bool = True,
    looped: bool = False,
    residual: bool = False,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> Target:
  """Random target with weights scaled so that activations stay O(1)."""
  head_width = width if head_width is None else head_width
  value_width = width if value_width is None else value_width
  check_positive(
      H=num_heads, L=num_layers, d=width, k=head_width, kv=value_width
  )
  if out_width is not None:
    check_positive(d_out=out_width)
  # Drawn in one compiled program, divided op by op as before (in a program
  # XLA may fuse the division into the draw, a last bit away).
  dtype = jnp.dtype(dtype)
  wq, wk, wv, wo, wu = _draw(
      key,
      num_heads,
      num_layers,
      width,
      head_width,
      value_width,
      out_width,
      looped,
      dtype,
  )
  scale = lambda fan_in: np.sqrt(fan_in).astype(dtype)
  wq, wk, wv = (w / scale(width) for w in (wq, wk, wv))
  wo = wo / scale(value_width * num_heads)
  if out_width is not None:
    wu = wu / scale(width)
  return Target(
      wq=wq, wk=wk, wv=wv, wo=wo, wu=wu, causal=causal, residual=residual
  )


@functools.partial(jax.jit, static_argnums=tuple(range(1, 9)))
def _draw(key, h, num_layers, d, k, kv, out_width, looped, dtype):
  """`init`'s weights before their 1/sqrt(fan-in), (wq, wk, wv, wo, wu): one
  compiled program per shape, where op-by-op draws compile a dozen."""
  lp = 1 if looped else num_layers
  kq, kk, kv_, ko, ku = jax.random.split(key, 5)
  wq = normal(kq, (lp, h, d, k), dtype)
  wk = normal(kk, (lp, h, d, k), dtype)
  wv = normal(kv_, (lp, h, d, kv), dtype)
  wo = normal(ko, (lp, h, kv, d), dtype)
  if looped:
    wq, wk, wv, wo = (
        jnp.repeat(w, num_layers, axis=0) for w in (wq, wk, wv, wo)
    )
  if out_width is None:
    wu = jnp.eye(d, dtype=dtype)
  else:
    wu = normal(ku, (d, out_width), dtype)
  return wq, wk, wv, wo, wu


def normal(
    key: jax.Array, shape: Sequence[int], dtype: jax.typing.DTypeLike
) -> jax.Array:
  """`jax.random.normal(key, shape, dtype)`, drawn flat and reshaped.

  Threefry counts the elements in row-major order, so the flat draw is the
  same array, bit for bit when both are compiled with the same XLA options.
  XLA CPU compiles the flat counter far faster: 6.9x for a (10, 2, 64, 64)
  draw (results/bench/draw_bench.md).
  """
  return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def apply(
    target: Target,
    x_BxTxd: jax.typing.ArrayLike,
    *,
    precision: jax.lax.PrecisionLike = transformer.HIGHEST,
) -> jax.Array:
  """T(X) for X of shape (B, T, d); returns (B, T, d_out)."""
  params = dict(
      wq=target.wq, wk=target.wk, wv=target.wv, wo=target.wo, readout=target.wu
  )
  return transformer.forward(
      params,
      x_BxTxd,
      num_layers=target.num_layers,
      causal=target.causal,
      residual=target.residual,
      precision=precision,
  )


def bilinear_forms(target: Target) -> np.ndarray:
  """B[l, h] = wq wk^T / sqrt(k): (L, H, d, d), float64 numpy."""
  wq, wk = np.asarray(target.wq, np.float64), np.asarray(target.wk, np.float64)
  return np.einsum("lhik,lhjk->lhij", wq, wk) / np.sqrt(wq.shape[-1])


def value_maps(target: Target) -> np.ndarray:
  """V[l, h] = wv wo: (L, H, d, d), float64 numpy."""
  wv, wo = np.asarray(target.wv, np.float64), np.asarray(target.wo, np.float64)
  return np.einsum("lhiv,lhvj->lhij", wv, wo)


def save(path: str, target: Target) -> None:
  """Writes the documented `.npz` format."""
  np.savez(
      path,
      wq=np.asarray(target.wq),
      wk=np.asarray(target.wk),
      wv=np.asarray(target.wv),
      wo=np.asarray(target.wo),
      wu=np.asarray(target.wu),
      causal=np.asarray(int(target.causal)),
      residual=np.asarray(int(target.residual)),
  )


def _flag(z, key, default, path):
  if key not in z.files:
    return default
  value = z[key]
  if value.shape != () or value.item() not in (0, 1):
    raise UserError(
        f"{path}: '{key}' must be a 0-d array holding 0 or 1, "
        f"got shape {value.shape} value {value.ravel()[:3]}"
    )
  return bool(value.item())


def load(path: str) -> Target:
  """Reads and validates a target `.npz`; returns a float64 numpy `Target`."""
  if not os.path.isfile(path):
    raise UserError(
        f"target file {path!r} does not exist; pass an .npz with keys "
        f"{', '.join(REQUIRED_KEYS)}"
    )
  try:
    z = np.load(path, allow_pickle=False)
  except Exception as e:  # numpy raises several types for a bad archive.
    raise UserError(f"{path}: not a readable .npz archive ({e})") from None
  missing = [key for key in REQUIRED_KEYS if key not in z.files]
  if missing:
    raise UserError(
        f"{path}: missing key(s) {missing}; a target needs wq, wk "
        f"(L,H,d,k), wv (L,H,d,kv), wo (L,H,kv,d), optional wu (d,d_out)"
    )
  unknown = sorted(set(z.files) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
  if unknown:
    raise UserError(
        f"{path}: unknown key(s) {unknown}; allowed: "
        f"{', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}"
    )
  arrays = {key: z[key] for key in REQUIRED_KEYS}
  for key, a in arrays.items():
    if a.ndim != 4:
      raise UserError(
          f"{path}: '{key}' has shape {a.shape}; expected 4 axes "
          f"(L, H, ., .)"
      )
  num_layers, num_heads, d, k = arrays["wq"].shape
  kv = arrays["wv"].shape[-1]
  check_positive(L=num_layers, H=num_heads, d=d, k=k, kv=kv)
  expected = {
      "wq": (num_layers, num_heads, d, k),
      "wk": (num_layers, num_heads, d, k),
      "wv": (num_layers, num_heads, d, kv),
      "wo": (num_layers, num_heads, kv, d),
  }
  if "wu" in z.files:
    arrays["wu"] = z["wu"]
    if arrays["wu"].ndim != 2 or arrays["wu"].shape[0] != d:
      raise UserError(
          f"{path}: 'wu' has shape {arrays['wu'].shape}; expected "
          f"(d, d_out) with d={d}"
      )
    check_positive(d_out=arrays["wu"].shape[1])
  else:
    arrays["wu"] = np.eye(d)
  for key, shape in expected.items():
    if arrays[key].shape != shape:
      raise UserError(
          f"{path}: '{key}' has shape {arrays[key].shape}; expected "
          f"{shape} to match wq (L,H,d,k)={expected['wq']} and "
          f"wv (..,kv={kv})"
      )
  for key, a in arrays.items():
    if not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(
        a.dtype, np.integer
    ):
      raise UserError(
          f"{path}: '{key}' has dtype {a.dtype}; expected a float array"
      )
    if not np.all(np.isfinite(a)):
      raise UserError(
          f"{path}: '{key}' holds {int(np.sum(~np.isfinite(a)))} "
          f"NaN/inf value(s); all weights must be finite"
      )
  arrays = {key: a.astype(np.float64) for key, a in arrays.items()}
  return Target(
      **arrays,
      causal=_flag(z, "causal", True, path),
      residual=_flag(z, "residual", False, path),
  )


def load_inputs(path: str, width: int) -> np.ndarray:
  """Reads and validates an input array X of shape (B, n, width)."""
  if not os.path.isfile(path):
    raise UserError(
        f"inputs file {path!r} does not exist; pass a .npy of shape "
        f"(B, n, d={width})"
    )
  try:
    x = np.load(path, allow_pickle=False)
  except Exception as e:
    raise UserError(f"{path}: not a readable .npy array ({e})") from None
  if x.ndim != 3 or x.shape[-1] != width or 0 in x.shape:
    raise UserError(
        f"{path}: inputs have shape {x.shape}; expected (B, n, d) "
        f"with d={width} to match the target"
    )
  if not (
      np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
  ):
    raise UserError(f"{path}: inputs have dtype {x.dtype}; expected floats")
  if not np.all(np.isfinite(x)):
    raise UserError(
        f"{path}: inputs hold {int(np.sum(~np.isfinite(x)))} NaN/inf "
        f"value(s); all inputs must be finite"
    )
  return x.astype(np.float64)
