r"""Choosing the k-hop table's learning rates and the UTs' embedding scale, on
validation seeds (100, 101) that no table run uses.

  python -m launch.sweep --config=configs/khop_select.py --workdir=results/khop/select
  python -m launch.sweep --config=configs/khop_select.py:part=uts --workdir=results/khop/select_uts
  python -m launch.sweep --config=configs/khop_select.py:part=batch --workdir=results/khop/select_batch
  python -m launch.sweep --config=configs/khop_select.py:part=k4 --workdir=results/khop/select_k4
  python -m launch.sweep --config=configs/khop_select.py:part=sanford --workdir=results/khop/select_sanford
  python -m launch.sweep --config=configs/khop_select.py:smoke --workdir=/tmp/s  # CI size

Each run is configs/khop.py (its protocol: constant learning rate after 100
warmup steps, batch 32, stopped at >= 99.5% validation accuracy at two
evaluations in a row, else at 20000 steps) with the run's arguments.

Each part's grid and why: docs/results.md, "The k-hop selection on validation
seeds". Run time: results/khop/select*/selection.md's cost line.
"""

from configs import common
from configs import khop

get_config = khop.get_config

VALIDATION_SEEDS = (100, 101)
COSINE_LRS = (1e-3, 3e-4)
PARTS = {
    "trained": dict(
        models=("trained:res_ln_mlp", "trained:attn"),
        lrs=(1e-3, 3e-4, 3e-3),
        scales=(1.0,),
        # Also with a cosine schedule over the cap (docs/results.md says why).
        cosine=("trained:attn",),
    ),
    "uts": dict(
        models=("sparse:res_ln", "random:res_ln"),
        lrs=(3e-2, 1e-2),
        scales=(1.0, 0.3, 0.1),
    ),
    "k4": dict(
        models=("random:res_ln", "random:res_ln_mlp", "sparse:res_ln"),
        lrs=(1e-2, 3e-2),
        scales=(0.1, 0.3),
        ks="4",
    ),
    # Sanford et al.'s protocol (issue 48 part 2): length 100, k = 2.
    "sanford": dict(
        models=(
            "trained:res_ln_mlp",
            "trained:attn",
            "sparse:attn",
            "random:attn",
        ),
        lrs=(1e-2, 3e-2),
        scales=(0.1, 0.3, 1.0),
        trained_lrs=(1e-3, 3e-4, 3e-3),
        ks="2",
        data="length=100",
        futility=True,
    ),
    "batch": dict(
        models=(
            "trained:res_ln_mlp",
            "trained:attn",
            "sparse:res_ln",
            "random:res_ln",
        ),
    ),
}
# part=batch's candidates: (batch size, warm-up steps) as multiples of the
# protocol's (configs/khop.py: 32 and 100), the protocol's first.
BATCHES = ((1, 1), (0.5, 1), (4, 1), (1, 10))
# The futility rule (part=sanford): stop once the best validation accuracy
# of the last fifth of the cap's evaluations (8 of 40) is not above the best
# before them by more than half a point (ut.training.train.stop_reason's
# plateau rule).
FUTILITY = {"train.plateau_evals": 8, "train.plateau_delta": 0.005}


def sweep(add, arg=None):
  args = common.parse_arg(arg, dict(part="trained", ks="2+3+4", smoke=False))
  if args["part"] not in PARTS:
    raise common.UserError(
        f"part={args['part']!r}; use one of {', '.join(PARTS)}"
    )
  part = PARTS[args["part"]]
  if args["part"] == "batch":
    ks = args["ks"] if "ks" in common.given(arg) else "2+3"
    _batch_sweep(add, part["models"], ks.split("+"), args["smoke"])
    return
  if args["part"] == "trained":
    ks = args["ks"].split("+")
  else:
    ks = part.get("ks", "2").split("+")
  # Smoke (CI): two lrs, the first scale and one seed: every code path, fast.
  lrs = part["lrs"][:2] if args["smoke"] else part["lrs"]
  scales = part["scales"][:1] if args["smoke"] else part["scales"]
  seeds = VALIDATION_SEEDS[:1] if args["smoke"] else VALIDATION_SEEDS
  data = f",{part['data']}" if "data" in part else ""
  rule = FUTILITY if part.get("futility") else {}
  for k in ks:
    for model in part["models"]:
      kind, variant = model.split(":")
      lrs_, scales_ = lrs, scales
      if kind == "trained" and "trained_lrs" in part:
        lrs_ = part["trained_lrs"][:2] if args["smoke"] else part["trained_lrs"]
        scales_ = (1.0,)
      for scale in scales_:
        for lr in lrs_:
          for seed in seeds:
            run = f"model={kind},variant={variant},k={k},seed={seed}{data}"
            if scale != 1.0:
              run += f",embed_scale={scale}"
            run += ",smoke" if args["smoke"] else ""
            add(run, **{"train.lr": lr}, **rule)
            if model in part.get("cosine", ()) and lr in COSINE_LRS:
              add(run, **{"train.lr": lr, "train.schedule": "cosine"})


def _batch_sweep(add, models, ks, smoke):
  """part=batch: every (batch, warm-up) of BATCHES at each cell's chosen
  hyperparameters (configs/khop_table.py's literals); smoke: one seed, the
  first two candidates, each cell at configs/khop.py's defaults."""
  from configs import khop_table  # pylint: disable=g-import-not-at-top

  base = khop.get_config("smoke" if smoke else None)
  seeds = VALIDATION_SEEDS[:1] if smoke else VALIDATION_SEEDS
  for k in ks:
    for model in models:
      kind, variant = model.split(":")
      if kind != "trained" and k != "2":
        continue
      chosen = {}
      scale = ""
      if not smoke:
        lr, embed_scale, schedule = khop_table.selected(kind, variant, int(k))
        chosen["train.lr"] = lr
        if schedule != base.train.schedule:
          chosen["train.schedule"] = schedule
        if embed_scale != 1.0:
          scale = f",embed_scale={embed_scale}"
      for seed in seeds:
        run = f"model={kind},variant={variant},k={k},seed={seed}{scale}"
        run += ",smoke" if smoke else ""
        for times_batch, times_warmup in BATCHES[:2] if smoke else BATCHES:
          overrides = dict(chosen)
          if times_batch != 1:
            batch = round(base.train.batch_size * times_batch)
            overrides["train.batch_size"] = batch
            overrides["train.steps"], overrides["eval.every"] = khop.at_batch(
                base, batch
            )
          if times_warmup != 1:
            overrides["train.warmup_steps"] = (
                base.train.warmup_steps * times_warmup
            )
          add(run, **overrides)


# selection.{md,json} in the workdir: per cell the hyperparameters the
# table uses (ut/experiments/selection.py's rule), to copy into its config.
REPORT = "selection"
