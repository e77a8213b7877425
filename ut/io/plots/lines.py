"""Accuracy against the UT's width (m / N) and validation curves against
step, of a sweep's finished and unfinished runs."""

import json
import math
import os

from matplotlib import figure

from ut.io.plots import tables


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
  for i, cell in enumerate(tables._ordered(p["cell"] for p in points)):
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
  cells = tables._ordered(
      label.split(" seed=")[0] for label in runs if runs[label]
  )
  settings = tables._ordered(_setting(cell) for cell in cells) or [
      ""
  ]  # No curve.
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
