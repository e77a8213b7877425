r"""XLA flags on and off: train_bench in alternating fresh processes, median ratios.

  python -m benchmarks.flags_bench --xla_flags=--xla_cpu_experimental_ynn_fusion_type=-reduce
  python -m benchmarks.flags_bench --xla_flags=... --part=all --rounds=2 --out=results/bench/ynn_reduce

XLA reads XLA_FLAGS once per process, so two settings cannot be timed in one
process. Each round runs `python -m benchmarks.train_bench --part=P` twice, in
fresh processes, without and with --xla_flags added to the XLA_FLAGS already
set (usually none); which goes first alternates from round to round. Every
measurement there is a step's FLOP/s over a roofline measured beside it in the
same process. Reported per measurement: the median
over rounds of that ratio without and with the flags, and of their quotient
with/without (above 1: the flags make the step faster). The machine's load moves
between processes; the roofline beside each step takes out most of it, and the
medians over rounds the rest of it that the quotients show.

--out=DIR saves the report as DIR/flags_bench.md and DIR/flags_bench.json, with
provenance; an existing report is kept unless --overwrite is given.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from ut.errors import UserError
from ut.io import reports

_XLA_FLAGS = flags.DEFINE_string(
    "xla_flags",
    None,
    "XLA flags to compare against the XLA_FLAGS already set "
    "(usually none), e.g. "
    "--xla_cpu_experimental_ynn_fusion_type=-reduce.",
    required=True,
)
_PART = flags.DEFINE_enum(
    "part",
    "fixed",
    ["all", "fixed", "configs"],
    "The train_bench part each process runs.",
)
_ROUNDS = flags.DEFINE_integer(
    "rounds", 3, "Process pairs (median reported).", lower_bound=1
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 5, "train_bench --repeats.", lower_bound=1
)
_OUT = flags.DEFINE_string("out", None, "Folder to save the report in.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an existing report in --out."
)


def run_train_bench(xla_flags, part, repeats, folder):
  """One fresh train_bench process; its measurements by name."""
  env = dict(os.environ, XLA_FLAGS=xla_flags)
  proc = subprocess.run(
      [
          sys.executable,
          "-m",
          "benchmarks.train_bench",
          f"--part={part}",
          f"--repeats={repeats}",
          f"--out={folder}",
      ],
      env=env,
      capture_output=True,
      text=True,
      check=False,
  )
  if proc.returncode:
    raise UserError(
        f"train_bench with XLA_FLAGS={xla_flags!r} failed: "
        + proc.stderr.strip().splitlines()[-1]
    )
  with open(os.path.join(folder, "train_bench.json")) as f:
    return {r["name"]: r for r in json.load(f)["results"]}


def summarize(rounds):
  """Per measurement, medians over rounds ({'base': {name: result}, 'flags':
  ...} each) of the roofline ratio, of flags/base per round, and of steps/s."""
  rows = []
  for name in rounds[0]["base"]:
    base = [r["base"][name]["ratio_analytic"] for r in rounds]
    with_flags = [r["flags"][name]["ratio_analytic"] for r in rounds]
    rows.append(
        dict(
            name=name,
            ratio_base=statistics.median(base),
            ratio_flags=statistics.median(with_flags),
            flags_over_base=statistics.median(
                f / b for f, b in zip(with_flags, base)
            ),
            steps_per_s_base=statistics.median(
                r["base"][name]["steps_per_s"] for r in rounds
            ),
            steps_per_s_flags=statistics.median(
                r["flags"][name]["steps_per_s"] for r in rounds
            ),
        )
    )
  return rows


def main(argv):
  del argv
  paths = (
      []
      if _OUT.value is None
      else [
          os.path.join(_OUT.value, f"flags_bench.{ext}")
          for ext in ("md", "json")
      ]
  )
  try:
    if paths:
      reports.check_folder(_OUT.value, "--out")
    reports.refuse_existing(paths, _OVERWRITE.value, flag="--overwrite")
    if _ROUNDS.value < 1:
      raise UserError(f"--rounds={_ROUNDS.value}; use 1 or more")
  except UserError as e:
    sys.exit(f"error: {e}")
  baseline, xla_flags = os.environ.get("XLA_FLAGS", ""), _XLA_FLAGS.value
  start = time.perf_counter()
  rounds = []
  with tempfile.TemporaryDirectory() as tmp:
    for i in range(_ROUNDS.value):
      settings = [
          ("base", baseline),
          ("flags", f"{baseline} {xla_flags}".strip()),
      ]
      got = {}
      for label, value in (settings if i % 2 == 0 else settings[::-1]):
        try:
          got[label] = run_train_bench(
              value,
              _PART.value,
              _REPEATS.value,
              os.path.join(tmp, f"{i}_{label}"),
          )
        except UserError as e:
          sys.exit(f"error: {e}")
      rounds.append(got)
      print(
          f"round {i + 1}/{_ROUNDS.value} done "
          f"({time.perf_counter() - start:.0f}s)",
          flush=True,
      )
  rows = summarize(rounds)
  lines = [
      f"[flags] XLA_FLAGS={xla_flags!r} against "
      f"{baseline!r}: train_bench --part={_PART.value}, medians over "
      f"{_ROUNDS.value} rounds of fresh processes",
      "",
      f"{'measurement':44s} {'ratio':>6s} {'ratio':>6s} {'flags/':>7s} "
      f"{'steps/s':>8s} {'steps/s':>8s}",
      f"{'':44s} {'base':>6s} {'flags':>6s} {'base':>7s} {'base':>8s} "
      f"{'flags':>8s}",
      "-" * 84,
  ]
  lines += [
      f"{r['name'][:44]:44s} {r['ratio_base']:6.3f} {r['ratio_flags']:6.3f} "
      f"{r['flags_over_base']:7.2f} {r['steps_per_s_base']:8.2f} "
      f"{r['steps_per_s_flags']:8.2f}"
      for r in rows
  ]
  lines.append(f"  total {time.perf_counter() - start:.0f}s")
  print("\n".join(lines))
  if paths:
    os.makedirs(_OUT.value, exist_ok=True)
    with open(paths[0], "w") as f:
      f.write("\n".join(lines) + "\n")
    reports.write_json(
        paths[1],
        dict(
            xla_flags=xla_flags,
            baseline_xla_flags=baseline,
            part=_PART.value,
            rounds=_ROUNDS.value,
            repeats=_REPEATS.value,
            rows=rows,
            per_round=rounds,
            provenance=reports.provenance(),
        ),
    )
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
  app.run(main)
