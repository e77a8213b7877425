"""Simulate-check: run a fixed UT on compiled programs and compare with the targets.

Shape glossary: G targets checked at once, B inputs per target, T tokens,
d target width, m UT width, O output width.

`check` is jitted and vmapped over G targets (and their programs and inputs). The
UT runs in float32 and float64; the reference is the target run in float64.
  max_abs_err = max |UT(X, E) - T(X)|,   max_rel_err = max_abs_err / max |T(X)|.
"""

import functools
import os
import time
import warnings

from absl import logging
import jax
import numpy as np

from ut import bounds
from ut import compile as compile_lib
from ut import reports
from ut import targets as targets_lib
from ut import transformer
from ut.constructions import gaussian
from ut.constructions import sparse
from ut.errors import UserError

DTYPES = ("float32", "float64")


def ut_apply(ut, program, x_BxTxD, *, num_layers, causal, residual):
  """UT(X, E): the structured path for a `SparseUT`, the dense forward otherwise."""
  if isinstance(ut, sparse.SparseUT):
    return sparse.sparse_apply(ut, program["embed"], x_BxTxD, causal=causal,
                               residual=residual, readout=program["readout"])
  params = dict(ut, embed=program["embed"], readout=program["readout"])
  return transformer.forward(params, x_BxTxD, num_layers=num_layers,
                             causal=causal, residual=residual)


@functools.partial(jax.jit, static_argnames=("num_layers", "causal", "residual"))
def batched_ut(ut, programs, x_GxBxTxD, *, num_layers, causal, residual):
  """UT outputs for G programs at once: (G, B, T, O)."""
  fn = functools.partial(ut_apply, ut, num_layers=num_layers, causal=causal,
                         residual=residual)
  return jax.vmap(fn)(programs, x_GxBxTxD)


@jax.jit
def batched_target(targets, x_GxBxTxD):
  """Target outputs for G stacked targets: (G, B, T, O)."""
  return jax.vmap(targets_lib.apply)(targets, x_GxBxTxD)


def _cast(tree, dtype):
  return jax.tree.map(
      lambda a: np.asarray(a, dtype) if np.issubdtype(np.asarray(a).dtype,
                                                      np.floating) else a, tree)


def errors(y, ref):
  """(max_abs_err, max_rel_err) of y against ref, in float64."""
  diff = np.abs(np.asarray(y, np.float64) - np.asarray(ref, np.float64))
  max_abs = float(diff.max())
  return max_abs, max_abs / max(float(np.abs(ref).max()), np.finfo(np.float64).tiny)


def stack(trees):
  """Stacks a list of equal-structure pytrees along a new leading axis."""
  return jax.tree.map(lambda *a: np.stack(a), *trees)


def check(ut, programs, targets, x_GxBxTxD, *, dtypes=DTYPES):
  """Runs the UT on G stacked programs and compares with G stacked targets.

  Returns {dtype: dict(max_abs_err, max_rel_err, output)} and the float64
  reference under "reference".
  """
  first = jax.tree.map(lambda a: a[0], targets)
  kw = dict(num_layers=first.num_layers, causal=first.causal,
            residual=first.residual)
  with jax.enable_x64(True):
    ref = np.asarray(batched_target(_cast(targets, np.float64),
                                    np.asarray(x_GxBxTxD, np.float64)))
    result = {"reference": ref}
    for dtype in dtypes:
      y = np.asarray(batched_ut(_cast(ut, dtype), _cast(programs, dtype),
                                np.asarray(x_GxBxTxD, dtype), **kw))
      max_abs, max_rel = errors(y, ref)
      result[dtype] = dict(max_abs_err=max_abs, max_rel_err=max_rel, output=y)
  return result


# ---------------------------------------------------------------------------
# Experiments driven by configs/simulate.py.


def _build_sparse(target, *, seed, m, k_u, shared):
  del seed, m, k_u, shared  # The sparse UT depends on (H, L, d) only.
  ut = sparse.make_sparse_ut(target.num_heads, target.num_layers, target.width)
  program, report = compile_lib.compile_sparse(ut, target)
  return ut, program, report


def _build_random(target, *, seed, m, k_u, shared):
  d = target.width
  k_u = d if k_u is None else k_u
  if k_u < d:
    raise UserError(f"k_u={k_u} is smaller than the target width d={d}; use "
                    f"--config.k_u={d} or larger")
  n = bounds.random_threshold(target.num_heads, target.num_layers, d, k_u, d,
                              residual=target.residual,
                              shared=shared and target.residual)
  ut = gaussian.make_gaussian_ut(target.num_heads, target.num_layers,
                                 n if m is None else m,
                                 k_u, seed, out_width=d, shared=shared)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    program, report = compile_lib.compile_random(ut, target)
  for w in caught:
    logging.warning("%s", w.message)
  return ut, program, report


CONSTRUCTIONS = {"sparse": _build_sparse, "random": _build_random}


def build(target, construction, *, seed=0, m=None, k_u=None, shared=False):
  """Builds a UT and compiles the target: (ut, program, CompileReport).

  m (random only) defaults to N; k_u defaults to the target width d.
  """
  if construction not in CONSTRUCTIONS:
    raise UserError(f"unknown construction ut={construction!r}; use one of "
                    f"{sorted(CONSTRUCTIONS)}")
  if construction == "sparse" and (m is not None or k_u is not None):
    raise UserError("the sparse UT's width is fixed by (H, L, d); drop "
                    "--config.m and --config.k_u, or use --config.ut=random")
  return CONSTRUCTIONS[construction](target, seed=seed, m=m, k_u=k_u,
                                     shared=shared)


def _sibling_json(path):
  return os.path.splitext(path)[0] + ".json"


def run_target_file(config):
  """Bring your own target: Y = UT(X, E) with E compiled from the target file.

  Writes Y (B, n, d_out) to config.out and a JSON report beside it.
  """
  if not config.inputs or not config.out:
    raise UserError("with --config.target also pass --config.inputs=X.npy "
                    "(B, n, d) and --config.out=Y.npy")
  if not config.out.endswith(".npy"):
    raise UserError(f"--config.out={config.out!r} must end in .npy")
  report_path = _sibling_json(config.out)
  reports.refuse_existing([config.out, report_path], config.overwrite)
  if config.ut not in CONSTRUCTIONS:  # Fail before any compute.
    raise UserError(f"unknown construction ut={config.ut!r}; use one of "
                    f"{sorted(CONSTRUCTIONS)}")
  target = targets_lib.load(config.target)
  x = targets_lib.load_inputs(config.inputs, target.width)
  ut, program, creport = build(target, config.ut, seed=config.seed, m=config.m,
                                k_u=config.k_u, shared=config.shared)
  dtype = "float64" if config.x64 else "float32"
  start = time.perf_counter()
  result = check(ut, stack([program]), stack([target]), x[None], dtypes=(dtype,))
  seconds = time.perf_counter() - start
  y = result[dtype]["output"][0]
  h, num_layers, d = target.num_heads, target.num_layers, target.width
  report = {
      "construction": config.ut,
      "m": creport.m,
      "N": (creport.num_conditions if config.ut == "random" else
            bounds.random_threshold(h, num_layers, d, residual=target.residual)),
      "sparse_width": bounds.sparse_width(h, num_layers, d),
      "lower_bound": bounds.lower_bound(h, num_layers),
      "H": h, "L": num_layers, "d": d, "d_out": target.out_width,
      "causal": target.causal, "residual": target.residual,
      "looped": target.looped,
      "dtype": dtype,
      "max_abs_err": result[dtype]["max_abs_err"],
      "max_rel_err": result[dtype]["max_rel_err"],
      "condition_number": None if config.ut == "sparse" else creport.cond,
      "lstsq_rel_residual": creport.rel_residual,
      "exact": creport.exact,
      "compile_seconds": creport.seconds,
      "simulate_seconds": seconds,
      "seed": config.seed,
      "target": os.path.abspath(config.target),
      "inputs": os.path.abspath(config.inputs),
      "provenance": reports.provenance(config),
  }
  os.makedirs(os.path.dirname(os.path.abspath(config.out)), exist_ok=True)
  np.save(config.out, y)
  reports.write_json(report_path, report)
  return y, report


def table_row(num_heads, num_layers, width, config):
  """One row of the bounds-and-errors table for a random target of (H, L, d)."""
  start = time.perf_counter()
  key = jax.random.PRNGKey(config.seed)
  gens = []
  for i in range(config.num_targets):
    gens.append(targets_lib.init(jax.random.fold_in(key, i), num_heads=num_heads,
                                 num_layers=num_layers, width=width,
                                 causal=config.causal).astype(np.float64))
  rng = np.random.default_rng(config.seed)
  x = rng.standard_normal((config.num_targets, config.batch, config.seq_len, width))
  row = {"H": num_heads, "L": num_layers, "d": width,
         "sparse_m": bounds.sparse_width(num_heads, num_layers, width),
         "N": bounds.random_threshold(num_heads, num_layers, width),
         "lower_bound": bounds.lower_bound(num_heads, num_layers)}
  if config.search_min_m:
    row["min_exact_m"], _ = compile_lib.smallest_exact_width(
        gens[0], seed=config.seed)
  for name in CONSTRUCTIONS:
    # One UT (same seed) serves every target; each target has its own program.
    built = [build(t, name, seed=config.seed) for t in gens]
    result = check(built[0][0], stack([b[1] for b in built]), stack(gens), x)
    row[f"{name}_f32_rel"] = result["float32"]["max_rel_err"]
    row[f"{name}_f64_abs"] = result["float64"]["max_abs_err"]
    if name == "random":
      row["cond"] = max(b[2].cond for b in built)
  row["seconds"] = time.perf_counter() - start
  return row


def run_table(config, workdir):
  """The bounds-and-errors table over config.grid; writes CSV + JSON to workdir."""
  targets_lib.check_grid(config.grid)
  targets_lib.check_seed(config.seed, "config.seed")
  targets_lib.check_positive(**{"config.num_targets": config.num_targets,
                                "config.batch": config.batch,
                                "config.seq_len": config.seq_len})
  csv_path = os.path.join(workdir, "simulate_table.csv")
  json_path = os.path.join(workdir, "simulate_table.json")
  reports.refuse_existing([csv_path, json_path,
                           os.path.join(workdir, "simulate_table.md")],
                          config.overwrite)
  rows = []
  for i, (h, num_layers, d) in enumerate(config.grid):
    rows.append(table_row(h, num_layers, d, config))
    logging.info("row %d/%d (H=%d, L=%d, d=%d) done in %.1fs", i + 1,
                 len(config.grid), h, num_layers, d, rows[-1]["seconds"])
  reports.write_csv(csv_path, rows)
  reports.write_json(json_path, {"rows": rows,
                                 "provenance": reports.provenance(config)})
  reports.write_text(os.path.join(workdir, "simulate_table.md"),
                     reports.format_table(rows) + "\n")
  return rows
