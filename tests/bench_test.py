"""The benchmarks kept in benchmarks/: the training step's saved report
(`train_bench --out`) and its FLOP counts, the data-parallel step
(`dp_bench`), the peer comparison (`peer_bench`), `record`, and the sparse,
paths and residual orders side by side.

Every test that runs a benchmark or a subprocess is marked slow.
"""

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.extend.core
import pytest

from configs import dyck as dyck_config
from tests import cli_helpers
from ut.training import data as data_lib
from ut.training import models
from ut.training import step as step_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_bench(out, *flags):
  return subprocess.run(
      [
          sys.executable,
          "-m",
          "benchmarks.train_bench",
          "--part=fixed",
          "--repeats=1",
          "--min_block_s=0",
          f"--out={out}",
          *flags,
      ],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
  )


def fixed_step_flops():
  """Matmul FLOPs of one fixed-size step, counted here from the model: random
  UT, attention only, B=256 strings of T=64 tokens, m=256, H=2 heads of width
  32, L=2, vocabulary V=4, 2 classes, computed (on CPU) in its coefficient
  form (ut.cpu.coefficients._random_attn_coefficients; every position's logits).
  A matmul with a frozen or constant operand costs 1x more in the backward
  pass, one whose operands both move 2x. Layer 1: per head, the query and key
  tables E_tok R, E_pos R and the one-hot's rows of them, the scores, A
  times the one-hot, and the value tables [E_pos; E_tok] R_V for layer 2.
  Layer 2 mixes P = H (T + V) table rows: the tables times R_Q and R_K, the
  coefficients times those, the scores, A times the coefficients; then
  R_V U, the tables times it, and the logits."""
  b, t, m, h, k, v, c = 256, 64, 256, 2, 32, 4, 2
  p = h * (t + v)
  once = (
      2 * h * (2 * (v + t) * m * k + 2 * b * t * v * k)  # Layer 1 Q, K.
      + h * 2 * b * t * t * v  # A one-hot.
      + 2 * (t + v) * m * m * h  # Value tables.
      + 2 * 2 * p * m * k * h  # Layer 2: tables R_Q, R_K.
      + 2 * h * m * m * c  # R_V U.
  )
  twice = (
      2 * h * 2 * b * t * t * k  # Scores, both layers.
      + 2 * 2 * b * t * p * k * h  # Layer 2 queries and keys.
      + h * 2 * b * t * t * p  # A times the coefficients.
      + 2 * p * m * h * c  # Tables times R_V U.
      + 2 * b * t * h * p * c  # Logits.
  )
  return 2 * once + 3 * twice


def forward_flops(cases):
  """[(the forward's dot_general FLOPs, `train_bench.analytic_flops`'
  forward, B T M)] for cases (task module, config argument, model.m or 0 to
  keep the config's), every position's logits, counted in a subprocess
  (train_bench defines absl flags)."""
  code = (
      "import dataclasses, math, jax, jax.extend.core; from absl import "
      "flags; flags.FLAGS(['x']); from benchmarks import train_bench; "
      "from configs import dyck, khop; from ut.training import data, "
      "models, train\n"
      "def dots(j):\n"
      "  n = 0\n"
      "  for e in j.eqns:\n"
      "    if e.primitive.name == 'dot_general':\n"
      "      (c, _), _ = e.params['dimension_numbers']\n"
      "      n += 2 * math.prod(e.outvars[0].aval.shape) * math.prod("
      "e.invars[0].aval.shape[i] for i in c)\n"
      "    n += sum(dots(s) for s in jax.extend.core.jaxprs_in_params("
      "e.params))\n"
      "  return n\n"
      "for mod, arg, m in {cases!r}:\n"
      "  c = {{'dyck': dyck, 'khop': khop}}[mod].get_config(arg)\n"
      "  if m: c.model.m = m\n"
      "  task = data.make_task(c)\n"
      "  s = dataclasses.replace(models.model_spec(c, task.info), "
      "last_only=False)\n"
      "  p = models.init(jax.random.PRNGKey(0), s)\n"
      "  x = data.train_batch(c, task, 0)['tokens']\n"
      "  j = jax.make_jaxpr(lambda p: models.apply(p, s, x))(p).jaxpr\n"
      "  print(dots(j), train_bench.analytic_flops(s, *x.shape)[0], "
      "x.size * s.model_width)\n"
  ).format(cases=cases)
  proc = subprocess.run(
      [sys.executable, "-c", code],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      check=True,
  )
  lines = proc.stdout.split("\n")[: len(cases)]
  return [tuple(map(float, line.split())) for line in lines]


class TrainBenchTest(absltest.TestCase):

  @pytest.mark.slow
  def test_report_is_saved_and_kept(self):
    out = self.create_tempdir().full_path
    proc = run_bench(out)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(out, "train_bench.json")) as f:
      report = json.load(f)
    (fixed,) = report["results"]
    self.assertIn("fixed", fixed["name"])
    self.assertAlmostEqual(fixed["analytic_flops"], fixed_step_flops(), delta=1)
    self.assertGreater(fixed["steps_per_s"], 0)
    self.assertAlmostEqual(
        fixed["ratio_analytic"],
        fixed["analytic_flops"] * fixed["steps_per_s"] / fixed["roofline"],
        places=6,
    )
    self.assertIn("git_commit", report["provenance"])
    with open(os.path.join(out, "train_bench.md")) as f:
      text = f.read()
    self.assertIn(f"{fixed['ratio_analytic']:.3f}", text)
    self.assertIn("the issue's target of 0.65", text)
    if (os.cpu_count() or 1) > 1:  # One device on several cores: name dp_bench.
      self.assertIn("python -m benchmarks.dp_bench", text)
    before = os.path.getmtime(os.path.join(out, "train_bench.json"))
    proc = run_bench(out)
    cli_helpers.assert_one_line_error(
        self, proc, r"train_bench.md already exists; pass --overwrite"
    )
    self.assertEqual(
        os.path.getmtime(os.path.join(out, "train_bench.json")), before
    )

  @pytest.mark.slow
  def test_sparse_attn_forward_flops_match_its_matmuls(self):
    # Without a residual, the level routed from the leaves holds only their
    # state role: counted from the jaxpr's dot_generals, not from the formula.
    config = dyck_config.get_config("model=sparse,variant=attn")
    task = data_lib.make_task(config)
    # The formula counts the full forward (every position's logits), not
    # Dyck's last-position one (spec.last_only).
    spec = dataclasses.replace(
        models.model_spec(config, task.info), last_only=False
    )
    params = models.init(jax.random.PRNGKey(0), spec)
    batch = data_lib.train_batch(config, task, 0)
    jaxpr = jax.make_jaxpr(lambda p: step_lib.loss_and_metrics(p, spec, batch))(
        params
    )

    def dot_flops(jaxpr):
      total = 0
      for e in jaxpr.eqns:
        if e.primitive.name == "dot_general":
          (contract, _), _ = e.params["dimension_numbers"]
          lhs = e.invars[0].aval.shape
          total += (
              2
              * math.prod(e.outvars[0].aval.shape)
              * math.prod(lhs[i] for i in contract)
          )
        total += sum(
            dot_flops(s) for s in jax.extend.core.jaxprs_in_params(e.params)
        )
      return total

    b, t = batch["tokens"].shape
    # In its own process: the benchmarks' absl flags clash in one process.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from benchmarks import train_bench; from "
            "configs import dyck; from ut.training import data, models; c = dyck.get_config("
            "'model=sparse,variant=attn'); s = models.model_spec(c, data.make_task("
            f"c).info); print(train_bench.analytic_flops(s, {b}, {t})[0])",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    self.assertEqual(float(proc.stdout), dot_flops(jaxpr.jaxpr))

  @pytest.mark.slow
  def test_random_attn_coefficient_flops_match_its_matmuls(self):
    # The coefficient form's count (`train_bench.coefficient_flops`) against
    # the jaxpr's dot_generals, at two and three layers.
    rows = forward_flops(
        (
            ("dyck", "model=random,variant=attn", 0),
            ("khop", "model=random,variant=attn,k=2", 0),
        )
    )
    for counted, formula, _ in rows:
      self.assertGreater(counted, 0)
      self.assertEqual(formula, counted)

  @pytest.mark.slow
  def test_random_residual_coefficient_flops_match_its_matmuls(self):
    # The res_ln form's count (`train_bench.residual_flops`) against the
    # jaxpr's dot_generals at two and three layers, where the rule takes the
    # form; the count leaves out the final LayerNorm's two row sums, 4 B T M.
    rows = forward_flops(
        (
            ("khop", "model=random,variant=res_ln,k=1", 400),
            ("khop", "model=random,variant=res_ln,k=2", 928),
        )
    )
    for counted, formula, btm in rows:
      self.assertGreater(counted, 0)
      self.assertEqual(formula + 4 * btm, counted)

  @pytest.mark.slow
  def test_bad_flags_are_errors_before_any_timing(self):
    tmp = self.create_tempdir().full_path
    with open(os.path.join(tmp, "afile"), "w") as f:
      f.write("kept")
    cli_helpers.assert_one_line_error(
        self, run_bench(os.path.join(tmp, "afile")), r"--out=.*afile is a file"
    )
    proc = run_bench(tmp, "--repeats=0")
    self.assertNotEqual(proc.returncode, 0)
    self.assertNotIn("Traceback", proc.stderr)
    self.assertIn("--repeats=0", proc.stderr)
    self.assertEqual(sorted(os.listdir(tmp)), ["afile"])


def run_dp_bench(*flags):
  return subprocess.run(
      [
          sys.executable,
          "-m",
          "benchmarks.dp_bench",
          "--small",
          "--repeats=1",
          "--min_block_s=0",
          *flags,
      ],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
  )


@pytest.mark.slow
class DpBenchTest(absltest.TestCase):

  def test_data_parallel_step_matches_train_step_and_is_saved(self):
    out = self.create_tempdir().full_path
    proc = run_dp_bench("--devices=2", "--microbatches=2", f"--out={out}")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(out, "dp_bench.json")) as f:
      report = json.load(f)
    self.assertEqual(report["devices"], 2)
    (case,) = report["cases"]
    self.assertEqual(set(case["checks"]), {"dp", "dp_no_ynn"})
    for check in case["checks"].values():
      self.assertLess(max(check.values()), 1e-5)
    steps = case["steps"]
    self.assertAlmostEqual(steps["base"]["speedup"], 1.0)
    for st in steps.values():
      self.assertAlmostEqual(
          st["ratio_dot"] / st["ratio_split_dot"],
          case["rooflines"]["dot_split"] / case["rooflines"]["dot"],
          places=6,
      )
      self.assertAlmostEqual(
          st["speedup"],
          steps["base"]["ms_per_step"] / st["ms_per_step"],
          places=6,
      )
    with open(os.path.join(out, "dp_bench.md")) as f:
      self.assertIn("dp steps match train_step", f.read())
    before = os.path.getmtime(os.path.join(out, "dp_bench.json"))
    proc = run_dp_bench(f"--out={out}")
    cli_helpers.assert_one_line_error(
        self, proc, r"dp_bench.md already exists; pass --overwrite"
    )
    self.assertEqual(
        os.path.getmtime(os.path.join(out, "dp_bench.json")), before
    )

  def test_microbatches_that_do_not_divide_are_one_line_error(self):
    proc = run_dp_bench("--devices=2", "--microbatches=3")
    cli_helpers.assert_one_line_error(
        self,
        proc,
        r"--devices=2 x --microbatches=3 must divide the batch "
        r"size 16 \(fixed",
    )


def _python(*args, env=None):
  """`python args` (e.g. "-m", "benchmarks.peer_bench") from the repository
  root: the benchmarks' flags clash with each other in one process."""
  return subprocess.run(
      [sys.executable, *args],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
  )


class PeerBenchTest(absltest.TestCase):

  def test_torch_last_row_step_equals_the_full_step(self):
    pytest.importorskip("torch")  # The optional `bench` extra.
    proc = _python(
        "-c",
        """
import jax, numpy as np, torch
from benchmarks import peer_bench
torch.manual_seed(0)
case = peer_bench.build("dyck_trained")
case.batch = jax.tree.map(lambda a: a[:16], case.batch)
assert case.spec.last_only
full_loss, full = peer_bench.torch_step(case)[1]()
last_loss, last = peer_bench.torch_step(case, last_only=True)[1]()
err = max(
    float(np.abs(last[k] - v).max()) / max(float(np.abs(v).max()), 1e-30)
    for k, v in full.items()
)
print(abs(last_loss - full_loss), err)
""",
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    loss_diff, grad_err = map(float, proc.stdout.split()[-2:])
    self.assertLess(loss_diff, 1e-5)
    self.assertLess(grad_err, 1e-5)

  @pytest.mark.slow
  def test_one_case_checks_agreement_and_reports_every_column(self):
    proc = _python(
        "-m",
        "benchmarks.peer_bench",
        "--case=dyck_sparse",
        "--repeats=1",
        "--steps=1",
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    row = json.loads(
        next(l for l in proc.stdout.splitlines() if l.startswith("{"))
    )
    self.assertEqual(row["case"], "dyck_sparse")
    self.assertGreater(row["ut_ms"], 0)
    self.assertLess(row["max_grad_err"], 2e-4)
    for key in ("torch_ms", "torch_last_ms", "fused_mem_floor_ms"):
      self.assertIn(key, row)


class RecordTest(absltest.TestCase):

  @pytest.mark.slow
  def test_saves_output_keeps_it_and_writes_nothing_on_failure(self):
    out = os.path.join(self.create_tempdir().full_path, "r.md")
    ok = [sys.executable, "-c", "print('| a |')"]
    proc = _python("-m", "benchmarks.record", f"--out={out}", "--", *ok)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    with open(out) as f:
      text = f.read()
    self.assertRegex(text, r"^\$ .* -c .*# commit \S+, \d{4}-\d\d-\d\d, ")
    self.assertTrue(text.endswith("GFLOP/s before it\n\n| a |\n"), text)
    again = _python("-m", "benchmarks.record", f"--out={out}", "--", *ok)
    self.assertNotEqual(again.returncode, 0)
    self.assertIn("--overwrite", again.stderr)
    failed = os.path.join(os.path.dirname(out), "f.md")
    bad = [sys.executable, "-c", "import sys; print('x'); sys.exit(3)"]
    proc = _python("-m", "benchmarks.record", f"--out={failed}", "--", *bad)
    self.assertEqual(proc.returncode, 3)
    self.assertFalse(os.path.exists(failed))
    with open(out) as f:
      self.assertEqual(f.read(), text)


class SparseBenchTest(absltest.TestCase):

  @pytest.mark.slow
  def test_split_batch_contender_matches_the_dense_gradient(self):
    proc = _python(
        "-m",
        "benchmarks.sparse_bench",
        "--part=ratio",
        "--repeats=1",
        "--cpu_devices=2",
        env=dict(os.environ, JAX_PLATFORMS="cpu"),  # CPU devices, on any host.
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    diffs = re.findall(r"max rel diff of grads ([0-9.e+-]+)", proc.stdout)
    self.assertLen(diffs, 3, proc.stdout)  # structured, levels, _split.
    for diff in diffs:
      self.assertLess(float(diff), 1e-5)
    self.assertIn("batch split over 2 CPU devices", proc.stdout)
    self.assertLen(re.findall(r"structured_split [0-9.]+ ms", proc.stdout), 2)
    self.assertLen(re.findall(r"levels [0-9.]+ ms", proc.stdout), 2)


class PathsBenchTest(absltest.TestCase):

  @pytest.mark.slow
  def test_times_both_orders_after_checking_they_agree(self):
    proc = _python(
        "-m",
        "benchmarks.paths_bench",
        "--cases=khop_k2,dyck",
        "--repeats=1",
        "--steps=1",
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn("losses and states equal over 3 steps", proc.stdout)
    rows = re.findall(
        r"^  (\w+) +(\d+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +(\w+)$",
        proc.stdout,
        re.M,
    )
    self.assertEqual([r[0] for r in rows], ["khop_k2", "dyck"], proc.stdout)
    for _, _, slow, fast, ratio, _, _ in rows:
      slow, fast = float(slow), float(fast)
      self.assertBetween(
          float(ratio),
          (slow - 0.005) / (fast + 0.005) - 0.005,
          (slow + 0.005) / (fast - 0.005) + 0.005,
      )
    # The rule's pick: the paths up to 1.2x the levels' multiply-adds
    # (madds ratio = levels / paths >= 1 / 1.2), k-hop's paths, Dyck's levels.
    self.assertEqual(
        [(r[0], r[6]) for r in rows], [("khop_k2", "paths"), ("dyck", "levels")]
    )
    for row in rows:
      self.assertEqual(row[6] == "paths", float(row[5]) >= 1 / 1.2, row)


class ResidualBenchTest(absltest.TestCase):

  @pytest.mark.slow
  def test_times_both_orders_after_checking_they_agree(self):
    proc = _python(
        "-m",
        "benchmarks.residual_bench",
        "--cases=khop1_m400,dyck",
        "--repeats=1",
        "--steps=1",
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn("losses and states equal over 3 steps", proc.stdout)
    rows = re.findall(
        r"^  (\w+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)"
        r" +(\w+)$",
        proc.stdout,
        re.M,
    )
    self.assertEqual([r[0] for r in rows], ["khop1_m400", "dyck"], proc.stdout)
    for _, slow, fast, ratio, madds, weighted, rule in rows:
      slow, fast = float(slow), float(fast)
      self.assertBetween(
          float(ratio),
          (slow - 0.05) / (fast + 0.05) - 0.005,
          (slow + 0.05) / (fast - 0.05) + 0.005,
      )
      # Weighting the per-row part only lowers the ratio; the rule reads it.
      self.assertLessEqual(float(weighted), float(madds))
      self.assertEqual(rule == "form", float(weighted) >= 1.25, proc.stdout)
    self.assertEqual([r[6] for r in rows], ["form", "m_wide"])


class UnknownCaseTest(parameterized.TestCase):

  @parameterized.parameters(
      "benchmarks.paths_bench",
      "benchmarks.residual_bench",
  )
  def test_unknown_case_is_one_line_error(self, module):
    proc = _python("-m", module, "--cases=nope")
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn("unknown --cases ['nope']", proc.stderr)
    self.assertNotIn("Traceback", proc.stderr)


if __name__ == "__main__":
  absltest.main()
