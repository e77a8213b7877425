"""The simulate command's library (ut.experiments.simulate_table) as a user
runs it: bring-your-own target, bad input, and the table.

Most tests call what `launch.simulate` calls (`simulate_table.run_target_file`
and `run_table`, in float64 mode as the command sets it) on a config built
here; the test marked slow runs the command itself (its errors:
tests/launch/simulate_test.py).
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax

from configs import simulate as simulate_config
from tests import simulate_helpers
from ut.experiments import simulate_table


class PaddingTest(parameterized.TestCase):
  """Classes that fit one `Padding` share their compiled programs."""

  def test_table_rows_of_one_padding_compile_once(self):
    config = simulate_config.get_config("smoke")
    grid = ((1, 2, 3), (2, 2, 2), (2, 1, 3))
    pads = simulate_table.table_paddings(grid)
    self.assertLen(set(pads), 1)
    jax.clear_caches()
    with jax.enable_x64(True):  # As launch.simulate runs the table.
      for i, ((h, num_layers, d), padding) in enumerate(zip(grid, pads)):
        with simulate_helpers.count_compiles() as compiles:
          row = simulate_table.table_row(h, num_layers, d, config, padding)
        if i:
          self.assertEqual(compiles[0], 0, (h, num_layers, d))
        self.assertLessEqual(row["sparse_f64_abs"], simulate_helpers.F64_ATOL)
        self.assertLessEqual(row["random_f64_abs"], simulate_helpers.F64_ATOL)
        self.assertLessEqual(row["sparse_f32_rel"], simulate_helpers.F32_RTOL)
        self.assertEqual(row["min_exact_m"], row["N"])


if __name__ == "__main__":
  absltest.main()
