"""ut.io.plots.bars: accuracy bars and the compiled-UT bars."""

import os

from absl.testing import absltest

from tests import table_rows
from ut.io import plots


class PlotsTest(absltest.TestCase):

  def test_accuracy_bars(self):
    fig = plots.accuracy_bars(
        table_rows.ROWS, "k", table_rows.PAPER, title="k-hop"
    )
    self.assertEqual([ax.get_title() for ax in fig.axes], ["k = 1", "k = 2"])
    bars = [p.get_height() for ax in fig.axes for p in ax.patches]
    self.assertSequenceAlmostEqual(sorted(bars), [35, 90, 99, 100])
    fig.savefig(os.path.join(self.create_tempdir().full_path, "k.png"))

  def test_accuracy_bars_keep_every_row_of_a_kind(self):
    # Two widths of the random UT and two caps of the trained model in one
    # panel: each row is a bar of its own, labelled by what tells it apart,
    # at its test accuracy where it has one.
    base = dict(
        table_rows.ROWS[2], variant="attn", accuracy_std=0.0, test_std=0.0
    )
    rows = [
        dict(base, kind="random", width=256, cap=20000, test_mean=0.5),
        dict(base, kind="random", width=928, cap=20000, test_mean=0.6),
        dict(
            base,
            kind="random",
            variant="res_ln",
            width=256,
            cap=20000,
            test_mean=0.7,
        ),
        dict(base, kind="trained", width=64, cap=20000, test_mean=0.8),
        dict(base, kind="trained", width=64, cap=100000, test_mean=0.9),
    ]
    fig = plots.accuracy_bars(rows, "k")
    [ax] = fig.axes
    self.assertEqual(
        [t.get_text() for t in ax.get_xticklabels()],
        [
            "random\nm=256",
            "random\nm=928",
            "trained\n20000 steps",
            "trained\n100000 steps",
        ],
    )
    bars = sorted(
        (p.get_x() + p.get_width() / 2, p.get_height()) for p in ax.patches
    )
    self.assertSequenceAlmostEqual([h for _, h in bars], [50, 70, 60, 80, 90])
    # The res_ln bar stands beside the attn bar of the same width.
    self.assertLess(bars[1][0] - bars[0][0], 1)

  def test_compiled_bars(self):
    result = dict(
        rows=[
            dict(
                construction=c,
                m=m,
                target_accuracy=0.9,
                ut_accuracy=0.9,
                agreement=1.0,
            )
            for c, m in (("sparse", 416), ("random", 640))
        ]
    )
    fig = plots.compiled_bars({"dyck": result})
    self.assertLen(fig.axes[0].patches, 6)


if __name__ == "__main__":
  absltest.main()
