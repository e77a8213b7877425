"""Shared grid parsing for the paper-table sweeps (configs/*_table.py).

Grid arguments use '+' between values, e.g. `kinds=sparse+random,seeds=3`.
With the trained attention-only model in the grid, each of its runs also gets
two compiled-UT runs (sparse and random, `compiled=false` drops them): the
trained model compiled into a fixed UT and evaluated with no gradient step.
A run's seed sets E's and U's initialisation, its data, and the frozen
weights (model.ut_seed = the seed): each random-UT seed is a new machine.
Adaptive rules (more seeds, longer runs) are named as data, e.g.
`adapt("more_seeds", ...)`, and live in ut/experiments/sweep/rules.py.
"""

from configs import common

KINDS = "sparse+random+trained"
VARIANTS = "attn+res_ln+res_ln_mlp"


def parse_grid(arg, **extra):
  args = common.parse_arg(
      arg,
      dict(
          kinds=KINDS,
          variants=VARIANTS,
          seeds=3,
          compiled=True,
          embed_scale=1.0,
          smoke=False,
          **extra,
      ),
  )
  for key in ("kinds", "variants"):
    args[key] = args[key].split("+")
  if args["seeds"] < 1:
    raise common.UserError(f"seeds={args['seeds']}; use 1 or more")
  return args


def add_grid(add, args, axis, values, random_compiled_values=None):
  """add() one run per (axis value, kind, variant, seed) of the parsed grid,
  and compiled-UT runs: into the sparse UT for every axis value, into a random
  UT for those in random_compiled_values (default all)."""
  random_values = (
      values if random_compiled_values is None else random_compiled_values
  ).split("+")
  for value in values.split("+"):
    for kind in args["kinds"]:
      for variant in args["variants"]:
        for seed in range(args["seeds"]):
          run = (
              f"model={kind},variant={variant},{axis}={value},seed={seed}"
              + (
                  f",embed_scale={args['embed_scale']}"
                  if args["embed_scale"] != 1.0
                  else ""
              )
              + (",smoke" if args["smoke"] else "")
          )
          add(run)
          if args["compiled"] and (kind, variant) == ("trained", "attn"):
            # Compiled-UT rows: this trained model compiled into fixed UTs.
            add(run, compiled="sparse")
            if value in random_values:
              add(run, compiled="random")


def row_field(row, key):
  """row_field("model=random,variant=attn", "model") == "random"."""
  return dict(item.split("=") for item in row.split(","))[key]


def paper_rows(rows, args):
  """The rows (config arguments) whose kind and variant the grid keeps."""
  return [
      r
      for r in rows
      if row_field(r, "model") in args["kinds"]
      and row_field(r, "variant") in args["variants"]
  ]


def missing(literal, what, command, table):
  """The UserError for a cell whose choice is not written in the config:
  `literal` (e.g. "configs/dyck_table.py's LRS") has none for `what`;
  `command` is the selection sweep that chooses it, `table` its result."""
  return common.UserError(
      f"{literal} has no choice for {what}: choose it with `{command}` "
      f"and write it there from {table}"
  )
