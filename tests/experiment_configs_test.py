"""The sweeps beyond the paper's tables: widths, machines, selection."""

import json
import os
import re
from unittest import mock

from absl.testing import absltest

from configs import dyck_table
from configs import khop_select
from configs import khop_table
from configs import width
from configs import width_select
from ut.errors import UserError
from ut.experiments import selection
from ut.experiments import sweep
from ut.io import plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


class WidthTest(absltest.TestCase):

  def test_runs_are_ratios_of_the_threshold_narrowest_first(self):
    # N by hand from the size formulas (docs/design.md), H = 2, k_u = d = 32:
    # attention-only L = 2: 2*32*(2+4) + 32*4; residual L = 2 and 3:
    # 2*32*2*(1+3) + 32*9 and 2*32*2*(1+3+9) + 32*27.
    n = {"dyck": 512, "khop1": 800, "khop2": 2528}
    self.assertEqual({c: width.threshold(c) for c in width.CELLS}, n)
    runs = sweep.collect_runs(_module("width.py"))
    ms = [c.model.m for _, c in runs]
    self.assertEqual(ms, sorted(ms))
    self.assertLen(runs, 3 * len(width.RATIOS) * 3)
    want = sorted(
        round(r * n[cell]) for cell in n for r in width.RATIOS for _ in range(3)
    )
    self.assertEqual(ms, want)
    for _, c in runs:
      self.assertEqual(c.model.kind, "random")
      self.assertEqual(c.model.ut_seed, c.seed)  # Each seed a new draw.
    with self.assertRaisesRegex(UserError, "cells='nope'"):
      sweep.collect_runs(_module("width.py"), "cells=nope")

  def test_dyck_runs_take_the_lr_chosen_at_their_width(self):
    module = _module("width.py")
    # The default takes the table's lr, and needs no width selection.
    with mock.patch.dict(module.DYCK_LRS, clear=True):
      table = sweep.collect_runs(module, "cells=dyck")
      self.assertTrue(all("train.lr" not in name for name, _ in table))
      with self.assertRaisesRegex(UserError, "width/select/selection.md"):
        sweep.collect_runs(module, "cells=dyck,lrs=selected")
    table_lr = module.get_config("cell=dyck").train.lr
    ms = [round(r * width.threshold("dyck")) for r in width.RATIOS]
    lrs = {m: table_lr if m < 256 else table_lr / 3 for m in ms}
    with mock.patch.dict(module.DYCK_LRS, lrs, clear=True):
      runs = sweep.collect_runs(module, "cells=dyck,lrs=selected")
    self.assertLen(runs, 3 * len(ms))
    for name, c in runs:
      self.assertEqual(c.train.lr, lrs[c.model.m])
      # A run at the table's lr keeps its name (and so its record).
      self.assertEqual("train.lr" in name, c.model.m >= 256, name)
    with mock.patch.dict(module.DYCK_LRS, {64: table_lr}, clear=True):
      with self.assertRaisesRegex(UserError, "DYCK_LRS has no lr for m=128"):
        sweep.collect_runs(module, "cells=dyck,lrs=selected")
      # The k-hop cells need no Dyck selection.
      self.assertNotEmpty(
          sweep.collect_runs(module, "cells=khop1,lrs=selected")
      )
    with self.assertRaisesRegex(UserError, "lrs='best'"):
      sweep.collect_runs(module, "lrs=best")
    with mock.patch.dict(module.DYCK_LRS, lrs, clear=True):
      some = sweep.collect_runs(module, "cells=dyck,lrs=selected,ratios=1+2")
    self.assertEqual(sorted({c.model.m for _, c in some}), [512, 1024])
    self.assertEqual(
        [c.train.lr for _, c in some], [lrs[512]] * 3 + [lrs[1024]] * 3
    )
    for bad in ("3", "x", "1+"):
      with self.assertRaisesRegex(UserError, f"ratios='{re.escape(bad)}'"):
        sweep.collect_runs(module, f"ratios={bad}")


class MachinesTest(absltest.TestCase):

  def test_crosses_draws_with_programs(self):
    runs = sweep.collect_runs(_module("machines.py"))
    pairs = [(c.task, c.model.ut_seed, c.seed) for _, c in runs]
    self.assertLen(set(pairs), 12)
    self.assertEqual(
        {(u, s) for _, u, s in pairs},
        {(u, s) for u in (0, 1, 2) for s in (10, 11)},
    )
    # One cell per task: the draws and programs are its seeds.
    self.assertLen({sweep.group_key(c) for _, c in runs}, 2)


class SelectionTest(absltest.TestCase):

  def test_selection_runs_use_validation_seeds_only(self):
    table_seeds = {0, 1, 2}
    for name, arg in (
        ("khop_select.py", None),
        ("khop_select.py", "part=uts"),
        ("dyck_select.py", None),
        ("width_select.py", None),
    ):
      runs = sweep.collect_runs(_module(name), arg)
      self.assertNotEmpty(runs)
      self.assertFalse({c.seed for _, c in runs} & table_seeds, name)
      self.assertGreater(len({c.train.lr for _, c in runs}), 1, name)

  def test_dyck_exact_part_gives_each_row_its_kinds_lrs(self):
    runs = sweep.collect_runs(_module("dyck_select.py"), "part=exact")
    cells = {}
    for _, c in runs:
      self.assertEqual((c.seed, c.train.steps), (100, 3000))
      key = (c.model.kind, c.model.variant, c.data.mix)
      cells.setdefault(key, set()).add(c.train.lr)
    self.assertLen(cells, 8 * 2)
    self.assertEqual({k[2] for k in cells}, {"za_exact", "hard"})
    self.assertEqual(cells[("gpt2_random", "res_ln_mlp", "hard")], {1e-3, 3e-3, 1e-2})
    self.assertEqual(cells[("random", "res_ln_mlp", "za_exact")], {3e-3, 1e-2, 3e-2})
    self.assertEqual(cells[("trained", "attn", "hard")], {3e-4, 1e-3, 3e-3})
    with self.assertRaisesRegex(UserError, "part='x'; use za or exact"):
      sweep.collect_runs(_module("dyck_select.py"), "part=x")

  def test_sanford_part_gives_each_row_its_own_grid(self):
    runs = sweep.collect_runs(_module("khop_select.py"), "part=sanford")
    self.assertFalse({c.seed for _, c in runs} - {100, 101})
    grid = {}
    for _, c in runs:
      self.assertEqual(
          (c.data.length, c.data.alphabet, c.data.k, c.model.num_layers),
          (100, 4, 2, 3),
      )
      self.assertEqual(
          (c.train.plateau_evals, c.train.plateau_delta), (8, 0.005)
      )
      self.assertEqual(c.train.steps // c.eval.every // 5, 8)  # A fifth.
      cell = (c.model.kind, c.model.variant)
      grid.setdefault(cell, set()).add(
          (c.train.lr, c.model.embed_scale, c.seed)
      )
    uts = {(lr, s, seed) for lr in (1e-2, 3e-2) for s in (0.1, 0.3, 1.0)
           for seed in (100, 101)}
    trained = {(lr, 1.0, seed) for lr in (3e-4, 1e-3, 3e-3)
               for seed in (100, 101)}
    self.assertEqual(
        grid,
        {
            ("sparse", "attn"): uts,
            ("random", "attn"): uts,
            ("trained", "attn"): trained,
            ("trained", "res_ln_mlp"): trained,
        },
    )

  def test_width_selection_tries_every_lr_at_every_dyck_width(self):
    runs = sweep.collect_runs(_module("width_select.py"), None)
    n = width.threshold("dyck")
    got = sorted((c.model.m, c.train.lr) for _, c in runs)
    want = sorted(
        (round(r * n), lr) for r in width.RATIOS for lr in (1e-2, 3e-3, 3e-2)
    )
    self.assertEqual(got, want)
    for _, c in runs:  # Each run the width sweep's Dyck run but for seed, lr.
      self.assertEqual((c.model.kind, c.model.variant), ("random", "attn"))
      self.assertEqual(c.model.ut_seed, c.seed)
      self.assertEqual(c.data.mix, "za")
    smoke = sweep.collect_runs(_module("width_select.py"), "smoke")
    self.assertLen(smoke, 2 * len(width.RATIOS))
    self.assertEqual({c.seed for _, c in smoke}, {width_select.VALIDATION_SEED})

  def test_batch_part_sees_the_same_strings_between_evaluations(self):
    module = _module("khop_select.py")
    runs = [c for _, c in sweep.collect_runs(module, "part=batch,smoke")]
    self.assertEqual({c.seed for c in runs}, {khop_select.VALIDATION_SEEDS[0]})
    self.assertLen({c.train.batch_size for c in runs}, 2)
    for c in runs:  # Cap and evaluation interval in strings, as at batch 8.
      self.assertEqual(c.train.steps * c.train.batch_size, 4 * 8)
      self.assertEqual(c.eval.every * c.train.batch_size, 2 * 8)
    with mock.patch.object(
        khop_table, "selected", return_value=(0.005, 0.3, "cosine")
    ):
      full = [c for _, c in sweep.collect_runs(module, "part=batch,ks=3")]
    want = {
        (round(32 * b), 100 * w) for b, w in khop_select.BATCHES
    }  # Trained models only at k = 3; every candidate for each.
    for variant in ("res_ln_mlp", "attn"):
      got = {
          (c.train.batch_size, c.train.warmup_steps)
          for c in full
          if c.model.variant == variant and c.seed == 100
      }
      self.assertEqual(got, want)
    self.assertEqual({c.model.kind for c in full}, {"trained"})
    for c in full:
      self.assertEqual(c.train.steps * c.train.batch_size, 20000 * 32)
      self.assertEqual(c.eval.every * c.train.batch_size, 500 * 32)
      self.assertEqual((c.train.lr, c.train.schedule), (0.005, "cosine"))
    with mock.patch.object(
        khop_table, "selected", return_value=(0.005, 0.3, "constant")
    ):
      uts = [c for _, c in sweep.collect_runs(module, "part=batch,ks=2")]
    scales = {c.model.embed_scale for c in uts if c.model.kind != "trained"}
    self.assertEqual(scales, {0.3})

  def test_attention_only_trained_model_also_tries_a_cosine_schedule(self):
    runs = sweep.collect_runs(_module("khop_select.py"), None)
    cosine = {
        (c.model.kind, c.model.variant, c.train.lr)
        for _, c in runs
        if c.train.schedule == "cosine"
    }
    self.assertEqual(
        cosine, {("trained", "attn", 1e-3), ("trained", "attn", 3e-4)}
    )
    # Every cosine run has its constant twin (same cell, lr and seed).
    constant = {
        (c.model.variant, c.data.k, c.train.lr, c.seed)
        for _, c in runs
        if c.train.schedule == "constant"
    }
    for _, c in runs:
      if c.train.schedule == "cosine":
        self.assertIn((c.model.variant, c.data.k, c.train.lr, c.seed), constant)


def _chosen(folder):
  """results/<folder>/selection.json's choices, or None where it is absent."""
  path = os.path.join(ROOT, "results", folder, "selection.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)["chosen"]


class LiteralsTest(absltest.TestCase):
  """The configs' chosen hyperparameters are their selection sweeps' choices
  (written as literals), where the selection is recorded."""

  def _expect(self, folder, literal, of_choice, keep=lambda c: True):
    chosen = _chosen(folder)
    if chosen is None:  # Not recorded in this checkout: nothing to compare.
      return
    self.assertEqual(
        literal, dict(of_choice(c) for c in chosen if keep(c)), folder
    )

  def test_each_literal_is_its_selection(self):
    lr_scale_schedule = lambda c: (
        c["lr"], c["embed_scale"], c.get("schedule", "constant")
    )
    self._expect(
        "khop/select",
        khop_table.TRAINED,
        lambda c: ((c["variant"], c["data"]["k"]), lr_scale_schedule(c)),
    )
    self._expect(
        "khop/select_uts",
        khop_table.UTS,
        lambda c: (c["kind"], lr_scale_schedule(c)),
    )
    self._expect(
        "khop/select_batch",
        khop_table.BATCHES,
        lambda c: (
            (c["variant"], c["data"]["k"]),
            (c["batch_size"], c["warmup_steps"]),
        ),
        keep=lambda c: c["kind"] == "trained",
    )
    self._expect(
        "dyck/select",
        dyck_table.LRS,
        lambda c: ((c["kind"], c["variant"]), c["lr"]),
    )
    self._expect("width/select", width.DYCK_LRS, lambda c: (c["width"], c["lr"]))


class ChooseTest(absltest.TestCase):

  def test_most_successes_then_fewest_steps_then_accuracy(self):
    row = lambda lr, succ, med, acc, k=2: dict(
        kind="trained",
        variant="attn",
        width=64,
        data=json.dumps(dict(k=k)),
        lr=lr,
        successes=succ,
        median_steps_to_99=med,
        accuracy_mean=acc,
        seeds=2,
    )
    rows = [
        row(1e-3, 1, 500, 0.999),
        row(3e-4, 2, 4000, 0.995),  # Most successes wins.
        row(3e-3, 2, 9000, 0.999),
        row(1e-3, 0, None, 0.6, k=3),
        row(3e-4, 0, None, 0.7, k=3),  # None succeed: the best accuracy.
        row(3e-3, 0, None, float("nan"), k=3),  # Diverged: last.
    ]
    chosen = {
        json.loads(cell[2])["k"]: (best["lr"], [r["lr"] for r in ranked])
        for cell, best, ranked in selection.choose(rows)
    }
    self.assertEqual(chosen[2], (3e-4, [3e-4, 3e-3, 1e-3]))
    self.assertEqual(chosen[3], (3e-4, [3e-4, 1e-3, 3e-3]))

  def test_report_records_the_chosen_schedule_and_scale(self):
    workdir = self.create_tempdir().full_path
    rows = []
    for name, schedule, successes in (("a", "constant", 1), ("b", "cosine", 2)):
      os.makedirs(os.path.join(workdir, "runs", name))
      config = dict(
          model=dict(embed_scale=0.3),
          train=dict(schedule=schedule, batch_size=16, warmup_steps=1000),
      )
      with open(os.path.join(workdir, "runs", name, "metrics.json"), "w") as f:
        json.dump(dict(config=config), f)
      rows.append(
          dict(
              kind="trained",
              variant="attn",
              width=64,
              data=json.dumps(dict(k=4)),
              lr=1e-3,
              successes=successes,
              median_steps_to_99=1000.0,
              accuracy_mean=0.99,
              seeds=2,
              runs=name,
          )
      )
    selection.report(workdir, rows)
    with open(os.path.join(workdir, "selection.json")) as f:
      (chosen,) = json.load(f)["chosen"]
    self.assertEqual(
        (chosen["schedule"], chosen["embed_scale"], chosen["successes"]),
        ("cosine", 0.3, 2),
    )
    self.assertEqual((chosen["batch_size"], chosen["warmup_steps"]), (16, 1000))
    with open(os.path.join(workdir, "selection.md")) as f:
      columns = [c.strip() for c in f.readline().split("|")]
      self.assertContainsSubset(
          ["schedule", "m", "batch", "warmup", "median strings to 99%"],
          columns,
      )  # m: the width.

  def test_fewer_strings_not_fewer_steps_win_across_batch_sizes(self):
    row = lambda batch, med: dict(
        kind="trained",
        variant="attn",
        width=64,
        data=json.dumps(dict(k=2)),
        lr=1e-3,
        successes=2,
        median_steps_to_99=med,
        accuracy_mean=0.995,
        seeds=2,
        batch_size=batch,
    )
    # 1000 steps at 128 is 128000 strings; 3000 at 32 is 96000.
    ((_, best, ranked),) = selection.choose([row(128, 1000), row(32, 3000)])
    self.assertEqual(best["batch_size"], 32)
    self.assertEqual([r["batch_size"] for r in ranked], [32, 128])


class CurvesTest(absltest.TestCase):

  def test_one_line_per_run_on_a_log_axis(self):
    fig = plots.curves(
        {
            "sparse seed=0": [(500, 0.5), (1000, 0.9)],
            "sparse seed=1": [(500, 0.6), (1000, 0.95)],
            "trained seed=0": [(500, 0.7)],
        }
    )
    ax = fig.axes[0]
    self.assertEqual(ax.get_xscale(), "log")
    self.assertLen(ax.lines, 4)  # Three runs and the 99% line.
    # Runs of one cell share a colour.
    self.assertEqual(ax.lines[0].get_color(), ax.lines[1].get_color())
    self.assertNotEqual(ax.lines[0].get_color(), ax.lines[2].get_color())

  def test_one_panel_per_task_setting_with_its_legend_outside(self):
    fig = plots.curves(
        {
            "sparse m=8 k=2 lr=0.01 seed=0": [(500, 0.5), (1000, 0.9)],
            "random m=8 k=3 lr=0.01 seed=0": [(500, 0.4)],
            "random m=8 k=2 lr=0.01 seed=1": [(500, 0.6)],
            "trained m=8 k=3 lr=0.01 seed=0": [],  # No curve: not drawn.
        }
    )
    self.assertLen(fig.axes, 2)
    for ax, setting, cells in zip(
        fig.axes,
        ("k=2", "k=3"),
        (
            ["sparse m=8 k=2 lr=0.01", "random m=8 k=2 lr=0.01"],
            ["random m=8 k=3 lr=0.01"],
        ),
    ):
      legend = ax.get_legend()
      self.assertEqual(legend.get_title().get_text(), setting)
      self.assertEqual([t.get_text() for t in legend.get_texts()], cells)
      self.assertGreater(legend.get_bbox_to_anchor().x0, ax.bbox.x1 - 1)
    # Without a curve: one empty panel, as the notebooks may draw.
    self.assertLen(plots.curves({"a seed=0": []}).axes, 1)
    # Colours restart in each panel: the first cell of each is C0.
    self.assertEqual(fig.axes[0].lines[0].get_color(), "C0")
    self.assertEqual(fig.axes[1].lines[0].get_color(), "C0")

  def test_run_curves_reads_each_runs_curve(self):
    workdir = self.create_tempdir().full_path
    for name, seed, curve in (("a", 0, [[500, 0.5]]), ("b", 1, [])):
      os.makedirs(os.path.join(workdir, "runs", name))
      with open(os.path.join(workdir, "runs", name, "metrics.json"), "w") as f:
        json.dump(dict(seed=seed, curve=curve), f)
    row = dict(
        kind="sparse",
        variant="attn",
        width=416,
        data=json.dumps(dict(mix="za")),
        lr=0.01,
        runs="a;b",
    )
    self.assertEqual(
        plots.run_curves(workdir, [row]),
        {"sparse attn m=416 mix=za lr=0.01 seed=0": [(500, 0.5)]},
    )

  def test_unfinished_runs_are_drawn_in_their_setting_panel(self):
    workdir = self.create_tempdir().full_path
    config = dict(
        seed=1,
        model=dict(kind="random", variant="res_ln", m=5056, width=16),
        train=dict(lr=0.01, steps=20000),
        data=dict(k=2, length=32, alphabet=4),
    )
    for name, evals in (("late", "500,0.25,1.5\n1000,0.5,1.0\n"), ("new", "")):
      os.makedirs(os.path.join(workdir, "runs", name))
      with open(os.path.join(workdir, "runs", name, "config.json"), "w") as f:
        json.dump(config, f)
      with open(
          os.path.join(workdir, "runs", name, "eval_metrics.csv"), "w"
      ) as f:
        f.write("step,accuracy,loss\n" + evals)
    with open(os.path.join(workdir, "table.json"), "w") as f:
      json.dump(dict(rows=[], missing_runs=["late", "new", "unborn"]), f)
    unfinished = sweep.unfinished_runs(workdir)
    self.assertEqual(
        unfinished,
        [
            ("late", config, [(500, 0.25), (1000, 0.5)]),
            ("new", config, []),
            ("unborn", {}, []),
        ],
    )
    runs = plots.unfinished_curves(unfinished)
    label = "random res_ln m=5056 k=2 lr=0.01, unfinished seed=1"
    self.assertEqual(runs, {label: [(500, 0.25), (1000, 0.5)]})
    runs["sparse attn m=416 k=2 lr=0.01 seed=0"] = [(500, 0.9)]
    fig = plots.curves(runs)
    self.assertLen(fig.axes, 1)  # Both in the k=2 panel.
    self.assertLen(fig.axes[0].lines, 3)  # Two curves and the 99% line.


if __name__ == "__main__":
  absltest.main()
