"""The threshold curve: the error of random UTs against their width m (`run`)."""

import json
import math
import os
import time
import warnings

from absl import logging
from matplotlib import figure as figure_lib
from matplotlib import transforms
from matplotlib.backends import backend_agg
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import instances
from ut.core import simulate
from ut.core import targets as targets_lib
from ut.core.constructions import gaussian
from ut.errors import UserError
from ut.io import reports

OUTPUTS = ("threshold.csv", "threshold.json", "threshold.png")
SUMMARY_POINTS = (
    ("N-1", lambda n: n - 1),
    ("N", lambda n: n),
    ("1.25N", lambda n: math.ceil(1.25 * n)),
)


def widths(num_heads, num_layers, width, ratios):
  """The m grid of a row: ceil(r N) for every ratio, N - 1, N and ceil(H^L / 2)."""
  n = bounds.random_threshold(num_heads, num_layers, width)
  ms = {math.ceil(r * n) for r in ratios} | {n - 1, n}
  lower = bounds.lower_bound(num_heads, num_layers)
  if lower >= 1:
    ms.add(math.ceil(lower))
  return sorted(m for m in ms if m >= 1)


def random_targets(num_heads, num_layers, width, *, num, seed, causal=True):
  """`num` generic float64 targets from `targets.init`, keys fold_in(seed, i)
  (`instances.random_targets`: one compiled draw for every class)."""
  return instances.random_targets(
      num_heads, num_layers, width, num=num, seed=seed, causal=causal
  )


def point(targets, x_GxBxTxD, m, *, seed, padding=None):
  """Compiles G targets into one Gaussian UT of width m; errors per target.

  Returns dict(rel_errs, cond, residual), lists of G: the float64 max relative
  error of UT against target, cond(A) and the least-squares residual.
  padding: a `simulate.Padding` (ut_width >= m) to run the check at, so that
  one compiled program serves every m and class that fits it; None for the
  UT's own sizes.
  """
  first = targets[0]
  ut = gaussian.make_gaussian_ut(
      first.num_heads, first.num_layers, m, first.width, seed
  )
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Below N the fit is inexact by design.
    built = [compile_lib.compile_random(ut, t) for t in targets]
  programs = [b[0] for b in built]
  result = simulate.check(
      ut,
      simulate.stack(programs),
      simulate.stack(targets),
      x_GxBxTxD,
      dtypes=("float64",),
      padding=padding,
  )
  y, ref = result["float64"]["output"], result["reference"]
  rel = [simulate.errors(y[g], ref[g])[1] for g in range(len(targets))]
  return dict(
      rel_errs=rel,
      cond=[b[1].cond for b in built],
      residual=[b[1].rel_residual for b in built],
  )


def sweep_paddings(grid, ratios):
  """The `simulate.Padding` of each class of `grid`: classes of one padding
  share the compiled programs of their checks, at every m of their `widths`."""
  return simulate.paddings(
      [
          (h, num_layers, d, max(widths(h, num_layers, d, ratios)))
          for h, num_layers, d in grid
      ]
  )


def sweep_row(num_heads, num_layers, width, config, padding=None):
  """Rows (one per m) of the threshold curve of one target class.

  padding: the `simulate.Padding` its checks run at (default: the class's own
  L and H, and its largest m).
  """
  targets_lib.check_positive(H=num_heads, L=num_layers, d=width)
  n = bounds.random_threshold(num_heads, num_layers, width)
  lower = bounds.lower_bound(num_heads, num_layers)
  targets, x = instances.random_instances(
      num_heads,
      num_layers,
      width,
      num=config.num_targets,
      seed=config.seed,
      batch=config.batch,
      seq_len=config.seq_len,
      causal=config.causal,
  )
  rows = []
  ms = widths(num_heads, num_layers, width, config.ratios)
  if padding is None:
    padding = simulate.Padding(num_layers, num_heads, max(ms))
  for m in ms:
    start = time.perf_counter()
    p = point(targets, x, m, seed=config.seed, padding=padding)
    rows.append(
        {
            "H": num_heads,
            "L": num_layers,
            "d": width,
            "N": n,
            "lower_bound": lower,
            "sparse_m": bounds.sparse_width(num_heads, num_layers, width),
            "m": m,
            "m_over_N": m / n,
            "median_rel_err": float(np.median(p["rel_errs"])),
            "max_rel_err": float(np.max(p["rel_errs"])),
            "min_rel_err": float(np.min(p["rel_errs"])),
            "median_cond": float(np.median(p["cond"])),
            "max_lstsq_residual": float(np.max(p["residual"])),
            "seconds": time.perf_counter() - start,
        }
    )
  return rows


def _classes(rows):
  """Rows grouped by (H, L, d), in first-seen order, each sorted by m."""
  keys = dict.fromkeys((r["H"], r["L"], r["d"]) for r in rows)
  return {
      k: sorted(
          (r for r in rows if (r["H"], r["L"], r["d"]) == k),
          key=lambda r: r["m"],
      )
      for k in keys
  }


def summary(rows):
  """Per (H, L, d): the median and max relative error at N - 1, N and 1.25 N."""
  out = []
  for key, row_rows in _classes(rows).items():
    n = row_rows[0]["N"]
    entry = dict(
        zip(("H", "L", "d"), key), N=n, lower_bound=row_rows[0]["lower_bound"]
    )
    by_m = {r["m"]: r for r in row_rows}
    for name, fn in SUMMARY_POINTS:
      r = by_m.get(fn(n))
      entry[f"median_at_{name}"] = None if r is None else r["median_rel_err"]
      entry[f"max_at_{name}"] = None if r is None else r["max_rel_err"]
    out.append(entry)
  return out


def _save(fig, path):
  """Writes a PNG atomically (tmp file + rename); no-op without a path."""
  if path is not None:
    tmp = path + ".tmp"
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)


def plot(rows, path=None):
  """The threshold figure; returns the matplotlib Figure (and saves a PNG).

  Left: error (log) against m / N, one line per (H, L, d), median over targets
  with a min..max band; the dashed line is m = N. Right: the same against m on
  a log axis, where each class's N (dashed) and lower bound H^L / 2 (triangle on
  the x axis; H >= 2 only, it is trivial for H = 1) are apart enough to read.
  """
  fig = figure_lib.Figure(figsize=(13, 5), dpi=110)
  backend_agg.FigureCanvasAgg(fig)
  left, right = fig.subplots(1, 2)
  floor = np.finfo(np.float64).eps  # Exact zeros cannot go on a log axis.
  for i, ((h, num_layers, d), sel) in enumerate(_classes(rows).items()):
    color, n, lb = f"C{i % 10}", sel[0]["N"], sel[0]["lower_bound"]
    med, lo, hi = (
        [max(r[k], floor) for r in sel]
        for k in ("median_rel_err", "min_rel_err", "max_rel_err")
    )
    for ax, x in (
        (left, [r["m_over_N"] for r in sel]),
        (right, [r["m"] for r in sel]),
    ):
      ax.plot(
          x,
          med,
          "o-",
          ms=3,
          color=color,
          label=f"H={h}, L={num_layers}, d={d}: N={n}, H^L/2={lb:g}",
      )
      ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0)
    right.axvline(n, color=color, ls="--", lw=1)
    if h >= 2:
      on_axis = transforms.blended_transform_factory(
          right.transData, right.transAxes
      )
      right.plot(
          [lb],
          [0],
          "v",
          color=color,
          ms=10,
          clip_on=False,
          transform=on_axis,
          markeredgecolor="k",
          markeredgewidth=0.5,
      )
  left.axvline(1.0, color="k", ls="--", lw=1)
  left.text(1.01, 1e-8, "m = N", ha="left", va="center")
  left.set_xlim(left=0)
  left.set_xlabel("UT width m / N   (N = number of linear conditions on E)")
  left.set_title("error against m / N: the threshold is sharp at m = N")
  right.plot(
      [],
      [],
      "v",
      color="gray",
      markeredgecolor="k",
      markeredgewidth=0.5,
      ls="",
      label="lower bound H^L/2 (Thm 4.1)",
  )
  right.plot([], [], "k--", lw=1, label="m = N of each class")
  right.set_xscale("log")
  right.set_xlabel("UT width m (log)")
  right.set_title("against m: lower bound H^L/2 far below N")
  for ax in (left, right):
    ax.set_yscale("log")
    ax.set_ylabel("max relative error |UT - T| / |T|  (float64)")
    ax.grid(True, which="major", alpha=0.3)
  left.legend(fontsize=8, loc="center left")
  right.legend(fontsize=8, loc="center left")
  fig.suptitle(
      "Random per-layer Gaussian UT compiled by least squares: "
      "line = median over targets, band = min..max"
  )
  fig.tight_layout()
  _save(fig, path)
  return fig


def _check_config(config):
  targets_lib.check_grid(config.grid)
  targets_lib.check_seed(config.seed, "config.seed")
  if not config.ratios or any(not r > 0 for r in config.ratios):
    raise UserError(
        f"ratios={tuple(config.ratios)!r} must be positive m/N "
        f"values, e.g. (0.5, 1.0, 1.25)"
    )
  targets_lib.check_positive(
      num_targets=config.num_targets, batch=config.batch, seq_len=config.seq_len
  )


def run(config, workdir):
  """The threshold experiment over config.grid; writes CSV, JSON and PNG.

  Returns (rows, summary rows).
  """
  _check_config(config)
  paths = [os.path.join(workdir, name) for name in OUTPUTS]
  reports.refuse_existing(paths, config.overwrite)
  start = time.perf_counter()
  pads = sweep_paddings(config.grid, config.ratios)
  rows = []
  for i, ((h, num_layers, d), padding) in enumerate(zip(config.grid, pads)):
    rows.extend(sweep_row(h, num_layers, d, config, padding))
    logging.info(
        "row %d/%d (H=%d, L=%d, d=%d) done after %.1fs",
        i + 1,
        len(config.grid),
        h,
        num_layers,
        d,
        time.perf_counter() - start,
    )
  summ = summary(rows)
  os.makedirs(workdir, exist_ok=True)
  reports.write_csv(paths[0], rows)
  plot(rows, paths[2])
  reports.write_json(
      paths[1],
      {
          "rows": rows,
          "summary": summ,
          "seed": config.seed,
          "wall_seconds": time.perf_counter() - start,
          "provenance": reports.provenance(config),
      },
  )
  return rows, summ


def load(workdir):
  """Rows and summary of an earlier `run` (threshold.json)."""
  with open(os.path.join(workdir, "threshold.json")) as f:
    data = json.load(f)
  return data["rows"], data["summary"]
