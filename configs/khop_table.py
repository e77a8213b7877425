r"""The k-hop table under the protocol of configs/khop.py, with the
hyperparameters chosen on validation seeds.

  python -m launch.sweep --config=configs/khop_table.py --workdir=results/khop_v2
  python -m launch.sweep --config=configs/khop_table.py:ks=2,kinds=sparse --workdir=W
  python -m launch.sweep --config=configs/khop_table.py:smoke --workdir=/tmp/t  # CI size

First run the selection sweeps (configs/khop_select.py, both parts, into
results/khop_select and results/khop_select_uts): each run here takes its
learning rate from their selection.json (the trained model per variant and
k; the UTs: the sparse and the random UT's choice with res_ln at k = 2, lr
and embed_scale, for every variant and k of that kind), and says which file
is missing otherwise. A smoke run uses the configs' defaults.

Rows (our choice, from what the paper claims): attention-only, the sparse UT,
the random UT (m = 256) and the trained model; with res_ln, the sparse and the
random UT; the random UT with res_ln_mlp; the fully trained standard
transformer (res_ln_mlp). At k = 2 the random UT is also trained at the
sparse UT's width (m = 928, `matched_k`), so that "random below sparse" is
not "256 below 928"; wider random UTs cost m^2 per token and layer, which a
2-core CPU cannot afford at k >= 3 (results/width covers width on its own).
k = 1 is dropped (every cell was at 100%) and k = 4 is optional (ks=2+3+4):
its sparse UT (m = 4000) takes hours per run on one core at the 20000-step
cap. batch=selected trains instead only the trained rows whose batch size
or warm-up chosen on validation seeds (configs/khop_select.py:part=batch)
differs from the protocol's, at that choice, into their own workdir:
  python -m launch.sweep --config=configs/khop_table.py:kinds=trained,batch=selected,compiled=False --workdir=results/khop_v2_batch
Compiled-UT rows: the trained attention-only model compiled into the
sparse UT at every k and into a random UT at k in random_compiled_ks.
Runs stop at 99.5% validation accuracy or at the 20000-step cap. A cell one
of whose runs ends at the cap still rising (more than `rise`=1 point gained
over the cap's last fifth) trains all its seeds again at `longer`=5 times
the cap, planned once its first runs are recorded; that row stands beside
the capped one (paper.md's `last step / cap` column), so that no cell is
reported only from a curve cut while it rose.
Paper: attention-only UTs about 30-40% vs about 99% trained; with res_ln the
sparse UT 100%, the random UT 85.7%-96.1%.
"""

import os

from configs import common
from configs import khop
from configs import tables

ROOT = tables.ROOT
SELECTIONS = {
    "trained": "results/khop_select/selection.json",
    "ut": "results/khop_select_uts/selection.json",
    "batch": "results/khop_select_batch/selection.json",
}
ROWS = (
    "model=sparse,variant=attn",
    "model=random,variant=attn",
    "model=trained,variant=attn",
    "model=sparse,variant=res_ln",
    "model=random,variant=res_ln",
    "model=random,variant=res_ln_mlp",
    "model=trained,variant=res_ln_mlp",
)
SPARSE_M = {
    2: 928,
    3: 1952,
    4: 4000,
}  # ut.core.bounds.sparse_width(2, k+1, 32).

# The paper's numbers (DESIGN §7, from the seed summary; its k values are not
# given), in percent, by (kind, variant): written beside ours in paper.md.
PANEL = "k"
PAPER = {
    ("sparse", "attn"): "about 30-40",
    ("random", "attn"): "about 30-40",
    ("trained", "attn"): "about 99",
    ("sparse", "res_ln"): "100",
    ("random", "res_ln"): "85.7-96.1",
    ("random", "res_ln_mlp"): "above res_ln",
}


# The part argument of configs/khop_select.py that writes each selection.
SELECTION_PARTS = {"trained": "", "ut": ":part=uts", "batch": ":part=batch"}


def _choice(which, kind, variant, k):
  """The entry of selection `which` for (kind, variant, k); a UserError
  naming the sweep to run where the file or the entry is missing."""
  chosen = tables.chosen(
      ROOT,
      SELECTIONS[which],
      f"python -m launch.sweep --config=configs/khop_select.py"
      f"{SELECTION_PARTS[which]} "
      f"--workdir={os.path.dirname(SELECTIONS[which])}",
  )
  for c in chosen:
    if (c["kind"], c["variant"], c["data"]["k"]) == (kind, variant, k):
      return c
  raise common.UserError(
      f"{SELECTIONS[which]} has no choice for kind={kind}, "
      f"variant={variant}, k={k}: rerun its selection sweep with that cell"
  )


def selected(kind, variant, k):
  """(lr, embed_scale, schedule) the selection sweeps chose for this cell."""
  if kind == "trained":
    c = _choice("trained", kind, variant, k)
  else:
    c = _choice("ut", kind, "res_ln", 2)
  # Selections made before the schedule was a choice ran "constant".
  return c["lr"], c["embed_scale"], c.get("schedule", "constant")


def _at_selected_batch(rows, k):
  """batch=selected: the trained rows whose batch size or warm-up chosen by
  configs/khop_select.py:part=batch differs from the protocol's, each with
  its choice; the rest are the table's runs (batch=protocol), not repeated.
  The UTs keep the protocol's batch in the table (docs/results.md says why)."""
  out = []
  for row in rows:
    fields = dict(item.split("=") for item in row.split(","))
    if fields["model"] != "trained":
      continue
    c = _choice("batch", "trained", fields["variant"], k)
    extra = ""
    if c["batch_size"] != khop.BATCH:
      extra += f",batch={c['batch_size']}"
    if c["warmup_steps"] != khop.WARMUP:
      extra += f",warmup={c['warmup_steps']}"
    if extra:
      out.append(row + extra)
  return out


def get_config(arg=None):
  config = khop.get_config(arg)
  if "smoke" not in common.given(arg):
    kind, variant = config.model.kind, config.model.variant
    k = config.data.k
    lr, scale, schedule = selected(kind, variant, k)
    config.train.lr = lr
    config.train.schedule = schedule
    if "embed_scale" not in common.given(arg):
      config.model.embed_scale = scale
  return config


def sweep(add, arg=None, finished=None):
  args = tables.parse_grid(
      arg,
      ks="2+3",
      random_compiled_ks="2",
      matched_k=2,
      rows="paper",
      longer=5,
      rise=1.0,
      batch="protocol",
  )
  if args["batch"] not in ("protocol", "selected"):
    raise common.UserError(f"batch={args['batch']!r}; use protocol or selected")
  if args["rows"] == "all":
    tables.add_grid(add, args, "k", args["ks"], args["random_compiled_ks"])
    return
  if args["rows"] != "paper":
    raise common.UserError(f"rows={args['rows']!r}; use paper or all")
  smoke = ",smoke" if args["smoke"] else ""
  if args["embed_scale"] != 1.0:  # Over the selection's (names say so).
    smoke = f",embed_scale={args['embed_scale']}" + smoke
  for k in map(int, args["ks"].split("+")):
    rows = tables.paper_rows(ROWS, args)
    if k == args["matched_k"] and "random" in args["kinds"]:
      rows += [
          f"model=random,variant={v},m={SPARSE_M[k]}"
          for v in ("attn", "res_ln")
          if v in args["variants"]
      ]
    if args["batch"] == "selected":
      rows = _at_selected_batch(rows, k)
    for row in rows:
      run_of_seed = lambda seed, row=row, k=k: f"{row},k={k},seed={seed}{smoke}"
      names = []
      for seed in range(args["seeds"]):
        run = run_of_seed(seed)
        names.append(add(run))
        if args["compiled"] and row == "model=trained,variant=attn":
          add(run, compiled="sparse")
          if str(k) in args["random_compiled_ks"].split("+"):
            add(run, compiled="random")
      # A cell whose runs end at the cap still rising trains again, longer.
      tables.longer_runs(add, finished, names, run_of_seed, args)
