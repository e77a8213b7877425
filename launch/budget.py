"""Accuracy at matched budgets (strings seen) from committed sweep folders.

  python -m launch.budget --task=khop --out=results/budget
  python -m launch.budget --task=dyck --out=results/budget

Writes <out>/<task>.md, .json and .png (ut/experiments/budget/; no
training): per row mean ± std, per-seed minimum and success count at each
budget, the paper's number, and each claim's verdict with its protocol.
"""

from absl import flags

from configs import dyck_table
from configs import khop_table
from launch import cli
from ut.errors import UserError
from ut.experiments import budget

# Each task: its table config (PANEL, PAPER), sweeps, claims {name: variants},
# budgets. Dyck adds 10M strings: Zhong & Andreas's 10,000 steps of 1,000
# (results/dyck/za_model, their model and optimiser; its mix za_exact is a
# panel of its own, without a number of the paper).
TASKS = {
    "khop": (
        khop_table,
        ["results/khop", "results/khop/batch"],
        {"attention-only": ("attn",), "res_ln": ("res_ln", "res_ln_mlp")},
        budget.BUDGETS,
    ),
    "dyck": (
        dyck_table,
        ["results/dyck", "results/dyck/za_model"],
        {"attention-only": ("attn",)},
        budget.BUDGETS + (10_000_000,),
    ),
}

_TASK = flags.DEFINE_string("task", None, f"One of {', '.join(TASKS)}.")
_OUT = flags.DEFINE_string("out", "results/budget", "Output folder.")
_SOURCES = flags.DEFINE_list(
    "sources", None, "Sweep folders (default: task's)."
)
_BUDGETS = flags.DEFINE_list(
    "budgets", None, "Budgets in strings seen (default: the task's)."
)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace earlier outputs.")


def main(argv):
  del argv
  if _TASK.value not in TASKS:
    raise UserError(f"--task={_TASK.value}; use one of {', '.join(TASKS)}")
  config, sources, claims, budgets = TASKS[_TASK.value]
  if _BUDGETS.value is not None:
    if not all(b.isdigit() and int(b) > 0 for b in _BUDGETS.value):
      raise UserError(
          f"--budgets={','.join(_BUDGETS.value)}; use integers > 0"
      )
    budgets = map(int, _BUDGETS.value)
  report = budget.run(
      _TASK.value,
      _SOURCES.value or sources,
      _OUT.value,
      panel=config.PANEL,
      paper=config.PAPER,
      claims=claims,
      budgets=sorted(budgets),
      overwrite=_OVERWRITE.value,
  )
  for claim in report["claims"]:
    print(f"{claim['claim']}, {claim['panel']}: {claim['verdict']}")
  print(f"wrote {_OUT.value}/{_TASK.value}.md, .json and .png")


if __name__ == "__main__":
  flags.mark_flags_as_required(["task"])
  cli.run(main)
