"""ut.experiments.budget.verdicts: a cell against the paper's claim."""

from absl.testing import absltest
from absl.testing import parameterized

from tests import budget_helpers
from ut.experiments import budget


class VerdictTest(parameterized.TestCase):

  @parameterized.parameters(
      (0.42, (30, 40), [0.42], "match"),  # Within 2 points of the range.
      (0.43, (30, 40), [0.43], "miss"),
      (0.981, (100, 100), [0.981], "match"),
      (0.995, (85.7, 96.1), [0.995, 0.999], "ceiling"),
      (0.995, (85.7, 96.1), [0.995, 0.97], "miss"),  # One row below 99%.
  )
  def test_status(self, mean, band, compared, want):
    self.assertEqual(budget.status(mean, band, compared), want)

  @parameterized.parameters(
      (
          ["match", "match", "miss", "miss"],
          "reproduced at <= 160k strings, not at >= 640k strings under"
          " protocol P",
      ),
      (
          ["miss", "miss", "match", "match"],
          "reproduced at >= 640k strings, not at <= 160k strings under"
          " protocol P",
      ),
      (
          [None, "ceiling", "ceiling", "ceiling"],
          "untested: every row at the ceiling at 160k, 640k, 3.2M strings"
          " under protocol P",
      ),
      (
          [None, "miss", "miss", None],
          "not reproduced at 160k, 640k strings under protocol P",
      ),
      (
          ["match", "ceiling", "ceiling", "ceiling"],
          "reproduced at <= 64k strings; untested (ceiling) at >= 160k"
          " strings under protocol P",
      ),
      ([None] * 4, "untested: no runs at these budgets under protocol P"),
  )
  def test_verdict_text(self, statuses, want):
    got = budget.verdict(dict(zip(budget.BUDGETS, statuses)), "P")
    self.assertEqual(got, want)

  def _rows(self, sweep, finals_by_variant, steps=2):
    for variant, finals in finals_by_variant.items():
      for seed, a in enumerate(finals):
        budget_helpers.write_run(
            sweep, seed, [0.3, a], steps=steps, variant=variant
        )
    paper = {("sparse", "attn"): "100", ("sparse", "res_ln"): "85.7-96.1"}
    rows = budget.group_rows(budget.read_runs(sweep), "k")
    return budget.table(rows, (10, 20, 30), paper)

  def test_claim_at_the_ceiling_is_untested(self):
    sweep = self.create_tempdir().full_path
    rows = self._rows(sweep, {"attn": [0.995, 0.999], "res_ln": [0.992] * 2})
    (group,) = budget.claim_groups(rows, {"c": ("attn", "res_ln")})
    budget.judge(group, (10, 20, 30))
    self.assertEqual(group["statuses"], {10: "miss", 20: "ceiling", 30: None})
    self.assertEqual([r["statuses"][20] for r in rows], ["match", "ceiling"])
    self.assertStartsWith(group["verdict"], "not reproduced at <= 10")

  def test_an_incomplete_cell_is_not_judged(self):
    sweep = self.create_tempdir().full_path
    budget_helpers.write_run(sweep, 0, [0.3, 0.999, 0.999])
    budget_helpers.write_run(
        sweep, 1, [0.3, 0.999], steps=3, stop=budget_helpers.SUCCESS_STOP
    )
    budget_helpers.write_run(
        sweep, 2, [0.3, 0.5], steps=3, stop=budget_helpers.PLATEAU_STOP
    )
    rows = budget.table(
        budget.group_rows(budget.read_runs(sweep), "k"),
        (20, 30),
        {("sparse", "attn"): "about 30-40"},
        carry=("success",),  # The plateau-stopped seed counts nothing at 30.
    )
    self.assertLen(rows, 1)
    (group,) = budget.claim_groups(rows, {"c": ("attn",)})
    budget.judge(group, (20, 30))
    self.assertEqual(group["statuses"], {20: "miss", 30: None})


if __name__ == "__main__":
  absltest.main()
