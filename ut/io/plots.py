"""Result tables for the colabs: load, set beside the paper's numbers, plot.

Rows are passed in: those of a sweep's table.json (ut/experiments/sweep/tables.py:
task, kind, variant, data as a JSON string, seeds, accuracy_mean, accuracy_std
in [0, 1], runs; `sweep.finished_rows` reads a finished grid's) or of
compiled_ut.json (ut/training/trained_to_ut.py). Plotting functions return a matplotlib
Figure made without pyplot (no backend, no global state): a notebook saves it
with fig.savefig(path) and shows the PNG (IPython.display.Image).

`paper` maps (kind, variant), or (panel value, kind, variant) where the paper's
number holds for one panel only, to the paper's number as text in percent, e.g.
{("za", "random", "attn"): "94.4", ("random", "res_ln"): "85.7-96.1"}; the
numbers in the text (one, or a low-high range) are drawn on our bars.
"""

import json
import math
import os
import re

from matplotlib import figure
import numpy as np

from ut.io import reports


def panel_value(row, panel):
  """The row's data field `panel` (e.g. 'mix' or 'k')."""
  return json.loads(row["data"])[panel]


def paper_range(text):
  """'85.7-96.1' -> (85.7, 96.1), 'about 99' -> (99, 99), 'about the same' -> None."""
  numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text or "")]
  return (min(numbers), max(numbers)) if numbers else None


def beside_paper(rows, paper, panel):
  """A text table: panel, kind, variant, width m, seeds, the held-out set
  reported (the test set where the runs have one, else validation), ours
  (mean ± std %), paper (%), where the runs scored the test set at each
  evaluation its mean ± std at their best validation (`test_at_best_valid`),
  the seeds at >= 99% on validation and the
  median step at which they first were, the latest step a seed ended at
  beside the runs' step cap, and for compiled-UT rows the lowest agreement
  with the target (%)."""
  out = []
  for r in rows:
    mean, std, held_out = held_out_accuracy(r)
    ours = reports.mean_std(mean, std)
    out.append(
        {
            panel: panel_value(r, panel),
            "kind": r["kind"],
            "variant": r["variant"],
            "m": r.get("width") or "",
            "seeds": r["seeds"],
            "held out": held_out,
            "ours": ours,
            "paper": _paper(
                paper, panel_value(r, panel), r["kind"], r["variant"]
            ),
        }
    )
    if any("test_best_mean" in x for x in rows):  # launch.sweep --test_each.
      out[-1]["test at best valid"] = (
          reports.mean_std(r["test_best_mean"], r["test_best_std"])
          if "test_best_mean" in r
          else ""
      )
    if any("successes" in x for x in rows):
      out[-1]["≥99% (validation)"] = (
          f"{r['successes']}/{r['seeds']}" if "successes" in r else ""
      )
    if any(x.get("median_steps_to_99") is not None for x in rows):
      out[-1]["median step to 99%"] = reports.step(r.get("median_steps_to_99"))
    if any("cap" in x for x in rows):  # Training runs: where they stopped.
      out[-1]["last step / cap"] = (
          f"{r['max_steps']} / {r['cap']}" if "cap" in r else ""
      )
    if any(x.get("agreement_min") is not None for x in rows):  # Compiled rows.
      a = r.get("agreement_min")
      out[-1]["agreement (min)"] = "" if a is None else f"{100 * a:.2f}"
  return reports.format_table(out)


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


def held_out_accuracy(row):
  """(mean, std, "test") on the test set where a table row's runs have one,
  else (accuracy_mean, accuracy_std, "validation")."""
  test = row.get("test_mean")
  if test is not None and not math.isnan(test):
    return test, row.get("test_std"), "test"
  return row["accuracy_mean"], row["accuracy_std"], "validation"


def _paper(paper, value, kind, variant):
  return paper.get((value, kind, variant), paper.get((kind, variant), ""))


def _ordered(values):
  return list(dict.fromkeys(values))


def accuracy_bars(rows, panel, paper=None, title=""):
  """Accuracy (%) bars, mean ± std over seeds (on the test set where the runs
  have one, else validation, as `beside_paper`): one panel per data[panel]
  value, one group of bars per row label along x (`bar_label`), one bar per
  variant; the paper's number (or range) as a black diamond (with a bar over
  the range) on its bar."""
  paper = paper or {}
  panels = _ordered(panel_value(r, panel) for r in rows)
  variants = _ordered(r["variant"] for r in rows)
  width = 0.8 / len(variants)
  by_panel = {
      v: [r for r in rows if panel_value(r, panel) == v] for v in panels
  }
  labels = {
      v: _ordered(bar_label(r, by_panel[v]) for r in by_panel[v])
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
      mean, std, _ = held_out_accuracy(r)
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
      span = paper_range(_paper(paper, value, r["kind"], r["variant"]))
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


def against_width(points):
  """Final accuracy (%, mean ± std) and the share of seeds reaching 99%
  against m / N (log axis), one line per cell; m = N marked. `points`:
  dicts with cell, ratio, accuracy_mean, accuracy_std, successes, seeds.
  A point from fewer seeds than the most any point has is labelled with
  its seed count, so that a cell still training does not pass for a
  finished one."""
  fig = figure.Figure(figsize=(9, 3.4), layout="constrained")
  acc_ax, share_ax = fig.subplots(1, 2)
  most = max((p["seeds"] for p in points), default=0)
  for i, cell in enumerate(_ordered(p["cell"] for p in points)):
    mine = sorted(
        (p for p in points if p["cell"] == cell), key=lambda p: p["ratio"]
    )
    x = [p["ratio"] for p in mine]
    accuracy = [100 * p["accuracy_mean"] for p in mine]
    share = [p["successes"] / p["seeds"] for p in mine]
    acc_ax.errorbar(
        x,
        accuracy,
        yerr=_stds(mine),
        marker="o",
        capsize=3,
        color=f"C{i}",
        label=cell,
    )
    share_ax.plot(x, share, marker="o", color=f"C{i}", label=cell)
    for p, *ys in zip(mine, accuracy, share):
      if p["seeds"] < most:
        for ax, y in zip((acc_ax, share_ax), ys):
          ax.annotate(
              f"{p['seeds']} of {most} seeds",
              (p["ratio"], y),
              xytext=(4, 4),
              textcoords="offset points",
              fontsize=7,
              color=f"C{i}",
          )
  for ax, label in (
      (acc_ax, "final held-out accuracy (%)"),
      (share_ax, "share of seeds >= 99%"),
  ):
    ax.set_xscale("log", base=2)
    ax.axvline(1.0, color="black", ls="--", lw=1, label="m = N")
    ax.set_xlabel("m / N")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
  share_ax.set_ylim(-0.05, 1.05)
  # From 50% (chance on a balanced task) or below, so that a spread of a
  # tenth of a point does not fill the panel.
  lowest = min(
      (100 * p["accuracy_mean"] - e for p, e in zip(points, _stds(points))),
      default=50,
  )
  acc_ax.set_ylim(min(50, lowest - 2), 100.5)
  acc_ax.legend(fontsize=8, loc="lower right")
  return fig


def _stds(points):
  """Each point's accuracy_std in percent, 0 where it is NaN (one seed)."""
  return [
      0 if math.isnan(p["accuracy_std"]) else 100 * p["accuracy_std"]
      for p in points
  ]


def curves(runs, title="", threshold=0.99):
  """Held-out accuracy against step (log axis) for each run: `runs` maps a
  label to [(step, accuracy)], e.g. the `curve` of each run's metrics.json.

  Runs that share a label's prefix before " seed=" (a cell) share a colour.
  Cells whose labels name a task setting (a `k=` or `mix=` word, as
  `run_curves` writes them) get one panel per setting, each with its legend
  beside it, so that no legend covers a curve.
  """
  cells = _ordered(label.split(" seed=")[0] for label in runs if runs[label])
  settings = _ordered(_setting(cell) for cell in cells) or [""]  # No curve.
  fig = figure.Figure(
      figsize=(9, 0.5 + 2.8 * len(settings)), layout="constrained"
  )
  axes = fig.subplots(len(settings), 1, squeeze=False, sharex=True)[:, 0]
  for setting, ax in zip(settings, axes):
    mine = [cell for cell in cells if _setting(cell) == setting]
    for label, curve in runs.items():
      cell = label.split(" seed=")[0]
      if not curve or cell not in mine:
        continue
      steps, accs = zip(*curve)
      ax.plot(
          steps,
          [100 * a for a in accs],
          color=f"C{mine.index(cell) % 10}",
          alpha=0.8,
          lw=1,
          label=cell,
      )
    ax.axhline(100 * threshold, color="black", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_ylabel("held-out accuracy (%)")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    keep = dict(zip(labels, handles))
    ax.legend(
        keep.values(),
        keep.keys(),
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title=setting or None,
        title_fontsize=8,
    )
  axes[-1].set_xlabel("step")
  fig.suptitle(title)
  return fig


# The data settings that tell a sweep's cells apart beside the model: a cell
# label names them (`run_curves`), and `curves` draws a panel for each value.
_SETTINGS = ("k", "mix")


def _settings_words(data):
  """The words a cell label names its task settings by ("k=2"), from a run's
  data config."""
  return " ".join(f"{k}={data[k]}" for k in _SETTINGS if k in data)


def _setting(cell):
  """The task-setting words of a cell label ("k=2", "mix=za"), or ""."""
  return " ".join(
      w for w in cell.split() if w.startswith(tuple(f"{k}=" for k in _SETTINGS))
  )


def run_curves(workdir, rows):
  """{"<cell> seed=<seed>": curve} for every run of a sweep's rows that
  recorded one (runs/<name>/metrics.json's `curve`), for `curves`."""
  out = {}
  for row in rows:
    where = _settings_words(json.loads(row["data"]) if row.get("data") else {})
    cell = (
        f"{row['kind']} {row['variant']} m={row.get('width')} {where} "
        f"lr={row['lr']:g}"
    )
    for name in row["runs"].split(";"):
      path = os.path.join(workdir, "runs", name, "metrics.json")
      with open(path) as f:
        r = json.load(f)
      if r.get("curve"):
        out[f"{cell} seed={r.get('seed')}"] = [tuple(p) for p in r["curve"]]
  return out


def unfinished_curves(unfinished):
  """{"<cell>, unfinished seed=<seed>": curve} for `curves`, from
  `ut.experiments.sweep.unfinished_runs`' [(name, config, curve)]: the
  validation curves so far of runs not yet in a table, each cell labelled as
  `run_curves` labels a finished one (m: the random UT's model.m, else the
  model's width) and drawn in a colour of its own."""
  out = {}
  for _, config, curve in unfinished:
    if not curve or not config:
      continue
    model, where = config["model"], _settings_words(config.get("data", {}))
    size = f"m={model['m']}" if model.get("m") else f"width={model['width']}"
    cell = (
        f"{model['kind']} {model['variant']} {size} {where} "
        f"lr={config['train']['lr']:g}, unfinished"
    )
    out[f"{cell} seed={config.get('seed')}"] = list(curve)
  return out


def learnability(result):
  """Final test accuracy (%) against the relative noise on the compiled
  program (log axis), one colour per UT: each seed a dot, the mean a line,
  the mean accuracy at the start (before training) dotted;
  the compiled program with no step (star at the left edge) and the runs
  from a random start (dashed line, band over their seeds) marked.
  `result`: learnability.json (ut/experiments/learnability.py)."""
  fig = figure.Figure(figsize=(7, 4), layout="constrained")
  ax = fig.subplots()
  noisy = [r for r in result["rows"] if r["noise"] is not None]
  positive = sorted({r["noise"] for r in noisy if r["noise"] > 0})
  # s = 0 sits one decade left of the smallest positive noise.
  zero_at = positive[0] / 10 if positive else 1.0
  x_of = lambda s: s if s > 0 else zero_at
  # Every UT with rows or a compiled program (a UT whose runs are pending
  # shows its program alone).
  uts = _ordered([r["ut"] for r in result["rows"]] + list(result["programs"]))
  for i, ut in enumerate(uts):
    color = f"C{i}"
    mine = sorted((r for r in noisy if r["ut"] == ut), key=lambda r: r["noise"])
    xs, means = [], []
    for r in mine:
      accs = _run_accuracies(result, r)
      ax.scatter(
          [x_of(r["noise"])] * len(accs),
          [100 * a for a in accs],
          color=color,
          s=14,
          alpha=0.7,
      )
      xs.append(x_of(r["noise"]))
      means.append(100 * r["test_mean"])
    if mine:
      ax.plot(
          xs,
          means,
          color=color,
          label=f"{ut} UT (m={mine[0]['m']}): from E_c + noise",
      )
      ax.plot(
          xs,
          [100 * r["start_mean"] for r in mine],
          color=color,
          ls=":",
          marker="x",
          lw=1,
          label=f"{ut} UT: E_c + noise before training",
      )
    for r in result["rows"]:
      if r["ut"] == ut and r["noise"] is None:
        accs = [100 * a for a in _run_accuracies(result, r)]
        ax.axhline(
            100 * r["test_mean"],
            color=color,
            ls="--",
            lw=1,
            label=f"{ut} UT: from a random start",
        )
        ax.axhspan(min(accs), max(accs), color=color, alpha=0.1)
    program = result["programs"].get(ut)
    if program:
      ax.scatter(
          [zero_at / 2],
          [100 * program["ut_accuracy"]],
          marker="*",
          s=90,
          color=color,
          edgecolor="black",
          zorder=3,
          label=f"{ut} UT (m={program['m']}): compiled, no step",
      )
  ax.axhline(99, color="black", ls=":", lw=1)
  ax.set_xscale("log")
  if positive:
    ticks = [zero_at / 2, zero_at] + positive
    ax.set_xticks(ticks, ["E_c", "0"] + [f"{s:g}" for s in positive])
  ax.set_xlabel("relative noise on the compiled embedding")
  ax.set_ylabel("final test accuracy (%)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="best")
  return fig


def _run_accuracies(result, row):
  """The test accuracy of each run of a learnability row (`per_run`)."""
  return [result["per_run"][name] for name in row["runs"].split(";")]
