"""ut.io.plots.tables: the paper's ranges beside ours."""

import json

from absl.testing import absltest

from tests import table_rows
from ut.io import plots


class PlotsTest(absltest.TestCase):

  def test_paper_range(self):
    self.assertEqual(plots.paper_range("85.7-96.1"), (85.7, 96.1))
    self.assertEqual(plots.paper_range("about 99"), (99.0, 99.0))
    self.assertIsNone(plots.paper_range("about the same"))

  def test_beside_paper(self):
    lines = plots.beside_paper(
        table_rows.ROWS, table_rows.PAPER, panel="k"
    ).splitlines()
    self.assertLen(lines, 2 + len(table_rows.ROWS))
    self.assertRegex(lines[3], r"90\.00 ± 5\.00 \|\s+85\.7-96\.1 \|")
    self.assertRegex(lines[4], r"35\.00 \|\s+about 30-40 \|")  # No std: 1 seed.
    self.assertIn("validation", lines[3])
    # Where the runs have a test accuracy, that is the one reported.
    dyck_row = dict(
        table_rows.ROWS[0],
        data=json.dumps(dict(mix="za")),
        width=416,
        test_mean=0.9339,
        test_std=0.0127,
        successes=0,
    )
    [line] = plots.beside_paper(
        [dyck_row], {("za", "sparse", "res_ln"): "100"}, panel="mix"
    ).splitlines()[2:]
    self.assertRegex(
        line, r"\| 416 \|\s+2 \|\s+test \| 93\.39 ± 1\.27 \|\s+100 \|\s+0/2 \|"
    )
    # Trained rows say when their seeds reached 99% and where they stopped.
    trained = [
        dict(
            dyck_row,
            successes=1,
            median_steps_to_99=3500.0,
            max_steps=20000,
            cap=20000,
        ),
        dict(dyck_row, max_steps=100000, cap=100000),
    ]
    lines = plots.beside_paper(trained, {}, panel="mix").splitlines()
    self.assertRegex(lines[0], r"median step to 99% \| last step / cap \|$")
    self.assertRegex(lines[2], r"\|\s+1/2 \|\s+3500 \|\s+20000 / 20000 \|$")
    self.assertRegex(lines[3], r"\|\s+0/2 \|\s+\|\s+100000 / 100000 \|$")
    # Runs that scored the test set at each evaluation (--test_each): their
    # test accuracy at the best validation beside the one at the end.
    best = [dict(dyck_row, test_best_mean=0.975, test_best_std=0.01), dyck_row]
    lines = plots.beside_paper(best, {}, panel="mix").splitlines()
    self.assertRegex(lines[0], r"ours \| paper \| test at best valid \|")
    self.assertRegex(lines[2], r"93\.39 ± 1\.27 \|\s+\|\s+97\.50 ± 1\.00 \|")
    self.assertRegex(lines[3], r"93\.39 ± 1\.27 \|\s+\|\s+\|")


if __name__ == "__main__":
  absltest.main()
