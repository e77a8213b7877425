"""Sweeps: many training runs, batched where they share shapes.

Shape glossary: R runs in a group, D devices, B batch, T tokens.

A config file may define `sweep(add)`; each `add(arg, **overrides)` is one run:
`get_config(arg)` with dotted-field overrides, e.g.

  def sweep(add):
    for seed in range(3):
      add(f"model=random,seed={seed}", **{"train.lr": 1e-2})

Runs whose configs differ only in `seed`, `train.lr` and `model.ut_seed` share
every shape; such a group trains as one program (`train_group`): the train
step is vmapped over runs, and the run axis is sharded over all devices with a
NamedSharding mesh (several CPU devices, a GPU or TPU host alike). A group and
a single run share one loop, step, batch and evaluation
(`ut.training.loop.train_loop`). On a single CPU device runs go one after
another by default (`use_vmap`). Each run writes runs/<name>/metrics.json; a
restarted sweep skips runs that have one. The aggregate table has mean ± std
(ddof=1) over seeds.

Multi-host: call `jax.distributed.initialize()` first in every process
(`launch.sweep --distributed`); jax.devices() then spans all hosts and the
mesh shards each group's runs across them. Every process generates the
batches of every run (they are tiny) and places its own devices' share; only
process 0 reads and writes the workdir (it tells the others which runs are
done), so the hosts need not share a filesystem. Compiled-UT runs are left to
a one-process rerun of the same command.

The modules, in the order data flows through them:
  plan.py     the runs a config's sweep(add) adds, their shape groups, work units
  groups.py   a vmapped group trained as one program
  runs.py     `run_sweep`: passes over the plan, worker processes, JAX processes
  records.py  what the workdir has recorded (runs/<name>/metrics.json)
  tables.py   the aggregate rows, table.{csv,json,md}, the rows plots read
"""

from ut.experiments.sweep.groups import group_folder
from ut.experiments.sweep.groups import train_group
from ut.experiments.sweep.plan import BATCHED_KEYS
from ut.experiments.sweep.plan import collect_runs
from ut.experiments.sweep.plan import group_key
from ut.experiments.sweep.plan import GROUPED_KEYS
from ut.experiments.sweep.plan import load_config_module
from ut.experiments.sweep.plan import use_vmap
from ut.experiments.sweep.plan import work_units
from ut.experiments.sweep.records import recorded_metrics
from ut.experiments.sweep.runs import claim
from ut.experiments.sweep.runs import claims_folder
from ut.experiments.sweep.runs import run_cost
from ut.experiments.sweep.runs import run_sweep
from ut.experiments.sweep.runs import use_compilation_cache
from ut.experiments.sweep.runs import worker_command
from ut.experiments.sweep.tables import aggregate
from ut.experiments.sweep.tables import cost_note
from ut.experiments.sweep.tables import device_minutes
from ut.experiments.sweep.tables import finished_rows
from ut.experiments.sweep.tables import markdown_table
from ut.experiments.sweep.tables import on_cpu
from ut.experiments.sweep.tables import std
from ut.experiments.sweep.tables import SUCCESS
from ut.experiments.sweep.tables import train_minutes
from ut.experiments.sweep.tables import unfinished_note
from ut.experiments.sweep.tables import unfinished_runs
from ut.experiments.sweep.tables import write_table
