"""The learnability figure: final test accuracy against the noise on a
compiled program."""

from matplotlib import figure

from ut.io.plots import tables


def learnability(result):
  """Final test accuracy (%) against the relative noise on the compiled
  program (log axis), one colour per UT: each seed a dot, the mean a line,
  the mean accuracy at the start (before training) dotted;
  the compiled program with no step (star at the left edge) and the runs
  from a random start (dashed line, band over their seeds) marked.
  `result`: learnability.json (ut/experiments/learnability/report.py)."""
  fig = figure.Figure(figsize=(7, 4), layout="constrained")
  ax = fig.subplots()
  noisy = [r for r in result["rows"] if r["noise"] is not None]
  positive = sorted({r["noise"] for r in noisy if r["noise"] > 0})
  # s = 0 sits one decade left of the smallest positive noise.
  zero_at = positive[0] / 10 if positive else 1.0
  x_of = lambda s: s if s > 0 else zero_at
  # Every UT with rows or a compiled program (a UT whose runs are pending
  # shows its program alone).
  uts = tables._ordered(
      [r["ut"] for r in result["rows"]] + list(result["programs"])
  )
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
