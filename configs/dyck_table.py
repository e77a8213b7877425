r"""The Dyck-1 table: the paper's rows (ROWS), mixes `za` and `hard`, 3 seeds each,
5 where the first 3 seeds' validation accuracies spread by more than 2 points
(`more_seeds`, `spread`; the sweep adds them once the 3 are recorded).

  python -m launch.sweep --config=configs/dyck_table.py --workdir=results/dyck
  python -m launch.sweep --config=configs/dyck_table.py:mixes=za,seeds=5 --workdir=W
  python -m launch.sweep --config=configs/dyck_table.py:smoke --workdir=/tmp/t  # CI size

Each run is configs/dyck.py with the run's arguments and the learning rate
configs/dyck_select.py chose for its row (LRS, from
results/dyck/select/selection.md); docs/results.md has every choice we made
where the paper is silent. Every run of a mix is scored on the
same fixed validation set (eval_accuracy) and test set, neither ever trained
on (Zhong & Andreas's protocol; ut/training/data.py). Paper (attention-only,
za-style mix): sparse UT 100%, random UT 94.4%, trained about the same.
Expected result and run time: configs/dyck.py's docstring. The extra seeds are planned from recorded results, in a
single JAX process only (with several, every process must plan the same runs:
rerun the same command in one process to add them).
"""

from configs import common
from configs import dyck
from configs import tables

# The lr configs/dyck_select.py chose per row on mix za (the random UT of
# width 512 takes width 256's), by (kind, variant).
LRS = {  # results/dyck/select/selection.md
    ("sparse", "attn"): 0.01,
    ("random", "attn"): 0.03,
    ("trained", "attn"): 0.001,
    ("trained", "res_ln_mlp"): 0.001,
}
SELECT = (
    "python -m launch.sweep --config=configs/dyck_select.py "
    "--workdir=results/dyck/select"
)


def get_config(arg=None):
  """configs/dyck.py's config with its row's lr in LRS."""
  config = dyck.get_config(arg)
  if "smoke" in common.given(arg):
    return config
  kind, variant = config.model.kind, config.model.variant
  if (kind, variant) not in LRS:
    raise tables.missing(
        "configs/dyck_table.py's LRS",
        f"kind={kind}, variant={variant}",
        SELECT,
        "results/dyck/select/selection.md",
    )
  config.train.lr = LRS[kind, variant]
  return config


# The paper's numbers (DESIGN §7, from the seed summary), in percent, by
# (mix, kind, variant) or (kind, variant): written beside ours in paper.md.
PANEL = "mix"
PAPER = {
    ("za", "sparse", "attn"): "100",
    ("za", "random", "attn"): "94.4",
    ("za", "trained", "attn"): "about the same",
}


# The table's rows, attention-only as the paper's Dyck numbers are, and the
# fully trained standard transformer as the strong reference: (config
# argument, what the row is). Dropped for the budget: the UTs with res_ln and
# res_ln_mlp, and the trained res_ln model (the paper states no Dyck numbers
# for them; `rows=all` restores the earlier kinds x variants grid). The grid's
# kinds= and variants= arguments keep the rows of those kinds and variants.
ROWS = (
    "model=sparse,variant=attn",
    "model=random,variant=attn",  # m = 256.
    "model=random,variant=attn,m=512",  # m = N of H = 2, L = 2, d = k_u = 32.
    "model=trained,variant=attn",
    "model=trained,variant=res_ln_mlp",
)


def sweep(add, arg=None, adapt=None):
  args = tables.parse_grid(
      arg, mixes="za+hard", rows="paper", more_seeds=5, spread=2.0
  )
  if args["rows"] == "all":
    tables.add_grid(add, args, "mix", args["mixes"])
    return
  if args["rows"] != "paper":
    raise common.UserError(f"rows={args['rows']!r}; use paper or all")
  rows = tables.paper_rows(ROWS, args)
  smoke = ",smoke" if args["smoke"] else ""
  for mix in args["mixes"].split("+"):
    for row in rows:
      run_of_seed = lambda seed, row=row, mix=mix: (
          f"{row},mix={mix},seed={seed}{smoke}"
      )
      names = [add(run_of_seed(seed)) for seed in range(args["seeds"])]
      if args["compiled"] and row == "model=trained,variant=attn":
        for seed in range(args["seeds"]):
          add(run_of_seed(seed), compiled="sparse")
          add(run_of_seed(seed), compiled="random")
      # more_seeds where the first seeds disagree by more than spread points
      # (the plain runs only; the compiled rows keep the first seeds).
      if adapt is not None:
        adapt("more_seeds", names, run_of_seed, args)


# breakdown.{md,json}: test accuracy by length bucket and subset, beside the
# counting baseline (ut/experiments/figures.py).
REPORT = "dyck_breakdown"

