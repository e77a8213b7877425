"""ut.io.plots.lines: accuracy against width, and training curves."""

import json
import math
import os

from absl.testing import absltest

from ut.experiments import sweep
from ut.io import plots


class PlotsTest(absltest.TestCase):

  def test_against_width_shows_accuracy_from_chance(self):
    # Points within a tenth of a point of each other do not fill the panel:
    # the axis starts at 50% (or 2 points below the lowest mean - std).
    point = lambda ratio, mean, std: dict(
        cell="c",
        ratio=ratio,
        accuracy_mean=mean,
        accuracy_std=std,
        successes=1,
        seeds=3,
    )
    fig = plots.against_width(
        [point(0.5, 0.998, 0.001), point(1.0, 0.999, math.nan)]
    )
    self.assertEqual(fig.axes[0].get_ylim(), (50, 100.5))
    fig = plots.against_width([point(0.5, 0.30, 0.05), point(1.0, 0.9, 0.0)])
    self.assertAlmostEqual(fig.axes[0].get_ylim()[0], 23)

  def test_against_width_labels_points_with_fewer_seeds(self):
    point = lambda ratio, seeds: dict(
        cell="c",
        ratio=ratio,
        accuracy_mean=0.9,
        accuracy_std=0.01,
        successes=1,
        seeds=seeds,
    )
    fig = plots.against_width([point(1.0, 3), point(2.0, 2)])
    for ax in fig.axes:
      self.assertEqual([t.get_text() for t in ax.texts], ["2 of 3 seeds"])
      self.assertEqual(ax.texts[0].xy[0], 2.0)
    fig = plots.against_width([point(1.0, 3), point(2.0, 3)])
    self.assertEmpty(fig.axes[0].texts)


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
