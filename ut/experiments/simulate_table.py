"""The simulation experiments of configs/simulate.py: the bounds-and-errors table
over an (H, L, d) grid, and a user's own target file run through a compiled UT.

Both build UTs and check them with `ut.core.simulate`.
"""

import os
import time

from absl import logging
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import instances
from ut.core import simulate
from ut.core import targets as targets_lib
from ut.errors import UserError
from ut.io import reports


def _sibling_json(path):
  return os.path.splitext(path)[0] + ".json"


def run_target_file(config):
  """Bring your own target: Y = UT(X, E) with E compiled from the target file.

  Writes Y (B, n, d_out) to config.out and a JSON report beside it.
  """
  if not config.inputs or not config.out:
    raise UserError(
        "with --config.target also pass --config.inputs=X.npy "
        "(B, n, d) and --config.out=Y.npy"
    )
  if not config.out.endswith(".npy"):
    raise UserError(f"--config.out={config.out!r} must end in .npy")
  report_path = _sibling_json(config.out)
  reports.refuse_existing([config.out, report_path], config.overwrite)
  if config.ut not in instances.CONSTRUCTIONS:  # Fail before any compute.
    raise UserError(
        f"unknown construction ut={config.ut!r}; use one of "
        f"{sorted(instances.CONSTRUCTIONS)}"
    )
  target = targets_lib.load(config.target)
  x = targets_lib.load_inputs(config.inputs, target.width)
  ut, program, creport = instances.build(
      target,
      config.ut,
      seed=config.seed,
      m=config.m,
      k_u=config.k_u,
      shared=config.shared,
  )
  dtype = "float64" if config.x64 else "float32"
  start = time.perf_counter()
  result = simulate.check(
      ut,
      simulate.stack([program]),
      simulate.stack([target]),
      x[None],
      dtypes=(dtype,),
  )
  seconds = time.perf_counter() - start
  y = result[dtype]["output"][0]
  h, num_layers, d = target.num_heads, target.num_layers, target.width
  report = {
      "construction": config.ut,
      "m": creport.m,
      "N": (
          creport.num_conditions
          if config.ut == "random"
          else bounds.random_threshold(
              h, num_layers, d, residual=target.residual
          )
      ),
      "sparse_width": bounds.sparse_width(h, num_layers, d),
      "lower_bound": bounds.lower_bound(h, num_layers),
      "H": h,
      "L": num_layers,
      "d": d,
      "d_out": target.out_width,
      "causal": target.causal,
      "residual": target.residual,
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


def table_row(num_heads, num_layers, width, config, padding=None):
  """One row of the bounds-and-errors table for a random target of (H, L, d).

  padding: the `simulate.Padding` its checks run at (rows that share one share
  their compiled programs); None for the row's own sizes.
  """
  start = time.perf_counter()
  gens, x = instances.random_instances(
      num_heads,
      num_layers,
      width,
      num=config.num_targets,
      seed=config.seed,
      batch=config.batch,
      seq_len=config.seq_len,
      causal=config.causal,
  )
  row = {
      "H": num_heads,
      "L": num_layers,
      "d": width,
      "sparse_m": bounds.sparse_width(num_heads, num_layers, width),
      "N": bounds.random_threshold(num_heads, num_layers, width),
      "lower_bound": bounds.lower_bound(num_heads, num_layers),
  }
  if config.search_min_m:
    row["min_exact_m"], _ = compile_lib.smallest_exact_width(
        gens[0], seed=config.seed
    )
  for name in instances.CONSTRUCTIONS:
    # One UT (same seed) serves every target; each target has its own program.
    built = [instances.build(t, name, seed=config.seed) for t in gens]
    result = simulate.check(
        built[0][0],
        simulate.stack([b[1] for b in built]),
        simulate.stack(gens),
        x,
        padding=padding,
    )
    row[f"{name}_f32_rel"] = result["float32"]["max_rel_err"]
    row[f"{name}_f64_abs"] = result["float64"]["max_abs_err"]
    if name == "random":
      row["cond"] = max(b[2].cond for b in built)
  row["seconds"] = time.perf_counter() - start
  return row


def table_paddings(grid):
  """The `simulate.Padding` of each row of the table over `grid`.

  Rows of one padding share the compiled programs of their checks (the first
  of them compiles, and its `seconds` include it); a row's UT width is the
  wider of its sparse UT and its random one (m = N).
  """
  return simulate.paddings(
      [
          (
              h,
              num_layers,
              d,
              max(
                  bounds.sparse_width(h, num_layers, d),
                  bounds.random_threshold(h, num_layers, d),
              ),
          )
          for h, num_layers, d in grid
      ]
  )


def run_table(config, workdir):
  """The bounds-and-errors table over config.grid; writes CSV + JSON to workdir.

  Its rows share compiled programs (`table_paddings`).
  """
  targets_lib.check_grid(config.grid)
  targets_lib.check_seed(config.seed, "config.seed")
  targets_lib.check_positive(
      **{
          "config.num_targets": config.num_targets,
          "config.batch": config.batch,
          "config.seq_len": config.seq_len,
      }
  )
  csv_path = os.path.join(workdir, "simulate_table.csv")
  json_path = os.path.join(workdir, "simulate_table.json")
  reports.refuse_existing(
      [csv_path, json_path, os.path.join(workdir, "simulate_table.md")],
      config.overwrite,
  )
  pads = table_paddings(config.grid)
  rows = []
  for i, ((h, num_layers, d), padding) in enumerate(zip(config.grid, pads)):
    rows.append(table_row(h, num_layers, d, config, padding))
    logging.info(
        "row %d/%d (H=%d, L=%d, d=%d) done in %.1fs",
        i + 1,
        len(config.grid),
        h,
        num_layers,
        d,
        rows[-1]["seconds"],
    )
  reports.write_csv(csv_path, rows)
  reports.write_json(
      json_path, {"rows": rows, "provenance": reports.provenance(config)}
  )
  reports.write_text(
      os.path.join(workdir, "simulate_table.md"),
      reports.format_table(rows) + "\n",
  )
  return rows
