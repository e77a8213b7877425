"""ut.io.plots.lines: accuracy against width, and training curves."""

import math

from absl.testing import absltest

from ut.io import plots


class PlotsTest(absltest.TestCase):

  def test_against_width_shows_accuracy_from_chance(self):
    # Points within a tenth of a point of each other do not fill the panel:
    # the axis starts at 50% (or 2 points below the lowest mean - std).
    point = lambda ratio, mean, std: dict(
        cell="c",
        ratio=ratio,
        accuracy_mean=mean,
        accuracy_std=std,
        successes=1,
        seeds=3,
    )
    fig = plots.against_width(
        [point(0.5, 0.998, 0.001), point(1.0, 0.999, math.nan)]
    )
    self.assertEqual(fig.axes[0].get_ylim(), (50, 100.5))
    fig = plots.against_width([point(0.5, 0.30, 0.05), point(1.0, 0.9, 0.0)])
    self.assertAlmostEqual(fig.axes[0].get_ylim()[0], 23)

  def test_against_width_labels_points_with_fewer_seeds(self):
    point = lambda ratio, seeds: dict(
        cell="c",
        ratio=ratio,
        accuracy_mean=0.9,
        accuracy_std=0.01,
        successes=1,
        seeds=seeds,
    )
    fig = plots.against_width([point(1.0, 3), point(2.0, 2)])
    for ax in fig.axes:
      self.assertEqual([t.get_text() for t in ax.texts], ["2 of 3 seeds"])
      self.assertEqual(ax.texts[0].xy[0], 2.0)
    fig = plots.against_width([point(1.0, 3), point(2.0, 3)])
    self.assertEmpty(fig.axes[0].texts)


if __name__ == "__main__":
  absltest.main()
