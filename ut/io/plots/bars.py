"""Bar charts: accuracy per row beside the paper's numbers, and a compiled
UT's accuracy and agreement with its target."""

import math

from matplotlib import figure
import numpy as np

from ut.io.plots import tables


def bar_label(row, panel_rows):
  """The row's kind, with its width m where the panel's rows of that kind
  differ in width (the random UT at m = 256 and m = N), and its step cap
  where they differ in cap (a cell trained again for longer)."""
  same = [r for r in panel_rows if r["kind"] == row["kind"]]
  label = row["kind"]
  if len({r.get("width") for r in same}) > 1:
    label += f"\nm={row.get('width')}"
  if len({r.get("cap") for r in same}) > 1:
    label += f"\n{row.get('cap')} steps"
  return label


def accuracy_bars(rows, panel, paper=None, title=""):
  """Accuracy (%) bars, mean ± std over seeds (on the test set where the runs
  have one, else validation, as `beside_paper`): one panel per data[panel]
  value, one group of bars per row label along x (`bar_label`), one bar per
  variant; the paper's number (or range) as a black diamond (with a bar over
  the range) on its bar."""
  paper = paper or {}
  panels = tables._ordered(tables.panel_value(r, panel) for r in rows)
  variants = tables._ordered(r["variant"] for r in rows)
  width = 0.8 / len(variants)
  by_panel = {
      v: [r for r in rows if tables.panel_value(r, panel) == v] for v in panels
  }
  labels = {
      v: tables._ordered(bar_label(r, by_panel[v]) for r in by_panel[v])
      for v in panels
  }
  most = max(len(x) for x in labels.values())
  fig = figure.Figure(
      figsize=(2 + 1.1 * most * len(panels), 3.6), layout="constrained"
  )
  axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)
  for ax, value in zip(axes[0], panels):
    for r in by_panel[value]:
      i = labels[value].index(bar_label(r, by_panel[value]))
      j = variants.index(r["variant"])
      x = i - 0.4 + width * (j + 0.5)
      mean, std, _ = tables.held_out_accuracy(r)
      err = None if std is None or math.isnan(std) else 100 * std
      ax.bar(
          x,
          100 * mean,
          width,
          yerr=err,
          capsize=2,
          color=f"C{j}",
          label=r["variant"],
      )
      span = tables.paper_range(
          tables._paper(paper, value, r["kind"], r["variant"])
      )
      if span:
        ax.errorbar(
            x,
            sum(span) / 2,
            yerr=(span[1] - span[0]) / 2,
            fmt="D",
            color="black",
            ms=4,
            capsize=3,
            label="paper",
        )
    ax.set_xticks(range(len(labels[value])), labels[value], rotation=20)
    ax.set_title(f"{panel} = {value}")
    ax.set_ylim(0, 105)
    ax.grid(axis="y", alpha=0.3)
  axes[0][0].set_ylabel("accuracy (%)")
  keep = {}
  for ax in axes[0]:
    handles, labels = ax.get_legend_handles_labels()
    keep.update(zip(labels, handles))
  if "paper" in keep:
    keep["paper"] = keep.pop("paper")  # Last in the legend.
  fig.legend(keep.values(), keep.keys(), loc="outside right upper", fontsize=8)
  fig.suptitle(title)
  return fig


def compiled_bars(results):
  """Target accuracy, UT accuracy and agreement (%) per construction.

  results: {name: compiled_ut.json dict}, one panel per name (e.g. task).
  """
  metrics = ("target_accuracy", "ut_accuracy", "agreement")
  fig = figure.Figure(
      figsize=(1.5 + 3 * len(results), 3.6), layout="constrained"
  )
  axes = fig.subplots(1, len(results), squeeze=False, sharey=True)
  for ax, (name, result) in zip(axes[0], results.items()):
    constructions = [r["construction"] for r in result["rows"]]
    for j, metric in enumerate(metrics):
      x = np.arange(len(constructions)) - 0.4 + 0.8 / 3 * (j + 0.5)
      ax.bar(
          x,
          [100 * r[metric] for r in result["rows"]],
          0.8 / 3,
          color=f"C{j}",
          label=metric,
      )
    ax.set_xticks(
        range(len(constructions)),
        [f"{r['construction']}\nm={r['m']}" for r in result["rows"]],
    )
    ax.set_title(name)
    ax.set_ylim(0, 105)
    ax.grid(axis="y", alpha=0.3)
  axes[0][0].set_ylabel("%")
  fig.legend(
      *axes[0][0].get_legend_handles_labels(),
      loc="outside right upper",
      fontsize=8,
  )
  return fig
