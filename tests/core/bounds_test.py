"""ut.core.bounds: the size formulas take positive integers, numpy ones too."""

from absl.testing import absltest
import chex
import numpy as np

from ut.core import bounds
from ut.errors import UserError


class StructuredPathTest(chex.TestCase):

  def test_size_formulas_take_numpy_integers_only_positive(self):
    # ModelSpec accepts numpy integers; the formulas it calls must too.
    self.assertEqual(
        bounds.sparse_width(np.int64(2), np.int32(3), np.int64(2)),
        bounds.sparse_width(2, 3, 2),
    )
    for bad in (True, 2.0, 0):
      with self.assertRaisesRegex(UserError, "H=.* must be a positive integer"):
        bounds.sparse_width(bad, 3, 2)


if __name__ == "__main__":
  absltest.main()
