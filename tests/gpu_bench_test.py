"""benchmarks/gpu_bench.py at smoke size on CPU: every case and axis is in
its report, the gradient differences are exact where they must be, and what
does not fit the budget is recorded as skipped.

The whole smoke run compiles about 70 steps and gradients: it is marked slow.
"""

import json
import math
import os
import re
import tempfile

from absl.testing import absltest
import jax
import pytest

from benchmarks import gpu_bench
from ut.errors import UserError

SEEDS = (1, 3)  # One run and a vmapped group: the axis, at half the cost.
COLUMNS = (
    "impl",
    "precision",
    "seeds",
    "compile s",
    "ms/step",
    "ms/run",
    "GFLOP/s",
    "XLA MiB",
    "peak MiB",
    "grad diff",
    "note",
)


def tables(text):
  """{case: [row dict]} from the report's markdown tables."""
  out, case, header = {}, None, None
  for line in text.splitlines():
    if m := re.match(r"## (\w+): ", line):
      case, header = m.group(1), None
      out[case] = []
    elif line.startswith("|") and not line.startswith("|-"):
      cells = [c.strip() for c in line.strip("|").split("|")]
      if header is None:
        header = cells
      else:
        out[case].append(dict(zip(header, cells)))
  return out


class GpuBenchTest(absltest.TestCase):

  @pytest.mark.slow
  def test_smoke_run_reports_every_case_and_axis(self):
    out = os.path.join(tempfile.mkdtemp(), "gpu_bench.md")
    text = gpu_bench.run(out, smoke=True, seeds=SEEDS, budget_s=3600, rounds=2)
    with open(out) as f:
      self.assertEqual(f.read(), text)
    self.assertIn(jax.devices()[0].device_kind, text)
    self.assertIn(f"jax {jax.__version__}", text)
    self.assertRegex(text, r"commit [0-9a-f]{40}|commit unknown")
    self.assertRegex(text, r"2048\^2 float32 matmul: [\d.]+ GFLOP/s")
    found = tables(text)
    self.assertEqual(tuple(found), gpu_bench.CASE_NAMES)  # Costliest first.
    want = {
        (impl, precision, str(n))
        for impl in gpu_bench.IMPLS
        for precision in gpu_bench.PRECISIONS
        for n in SEEDS
    }
    for case, rows in found.items():
      with self.subTest(case=case):
        self.assertEqual(tuple(rows[0]), COLUMNS)
        got = {(r["impl"], r["precision"], r["seeds"]) for r in rows}
        self.assertEqual(got, want)
        self.assertLen(rows, len(want))
        for r in rows:
          cell = f"{case} {r['impl']}/{r['precision']}/{r['seeds']}"
          self.assertEqual(r["note"], "2 rounds x 1 steps", cell)
          for column in ("compile s", "ms/step", "ms/run", "GFLOP/s"):
            value = float(r[column])
            self.assertTrue(0 < value < math.inf, f"{cell}: {column}")
          self.assertAlmostEqual(
              float(r["ms/run"]),
              float(r["ms/step"]) / int(r["seeds"]),
              delta=1e-3,
          )
          self.assertGreater(float(r["XLA MiB"]), 0, cell)
          self.assertEqual(r["peak MiB"], "-", cell)  # CPU: no memory stats.
          if r["seeds"] != "1":
            self.assertEqual(r["grad diff"], "-", cell)
            continue
          diff = float(r["grad diff"])
          if r["impl"] == "reference":
            # Highest is the reference; on a CPU tensorfloat32 is float32.
            self.assertEqual(diff, 0.0, cell)
          else:
            self.assertLess(diff, 1e-4, cell)
    with open(os.path.splitext(out)[0] + ".json") as f:
      saved = json.load(f)
    self.assertEqual(set(saved["cases"]), set(gpu_bench.CASE_NAMES))
    self.assertEqual(
        saved["provenance"]["device"], jax.devices()[0].device_kind
    )
    for cells in saved["cases"].values():
      for c in cells:
        self.assertLen(c["times"], 2)
        self.assertGreater(c["ms_per_step"], 0)

  def test_what_does_not_fit_the_budget_is_recorded_as_skipped(self):
    out = os.path.join(tempfile.mkdtemp(), "gpu_bench.md")
    text = gpu_bench.run(out, smoke=True, budget_s=0, rounds=1)
    found = tables(text)
    self.assertEqual(tuple(found), gpu_bench.CASE_NAMES)
    self.assertEqual(text.count("skipped: budget"), len(gpu_bench.CASES))
    self.assertTrue(all(rows == [] for rows in found.values()))

  def test_bad_arguments_are_user_errors(self):
    for kwargs in (
        dict(cases=("nope",)),
        dict(seeds=("0",)),
        dict(seeds=("x",)),
        dict(rounds=0),
        dict(budget_s=-1),
    ):
      with self.subTest(**kwargs):
        with self.assertRaises(UserError):
          gpu_bench.run(None, smoke=True, **kwargs)


if __name__ == "__main__":
  absltest.main()
