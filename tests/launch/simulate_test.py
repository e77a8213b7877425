"""`python -m launch.simulate` end to end: exit status, the one `error:` line,
no traceback, no output."""

import os

from absl.testing import absltest
import numpy as np
import pytest

from tests import cli_helpers
from tests import simulate_helpers


@pytest.mark.slow
class CommandErrorTest(absltest.TestCase):
  """End to end: exit status, the one `error:` line, no traceback, no output."""

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    rng = np.random.default_rng(0)
    simulate_helpers.write_target(os.path.join(self.tmp, "T.npz"), rng)
    np.save(os.path.join(self.tmp, "X.npy"), rng.standard_normal((2, 3, 4)))

  def run_files(self, target="T.npz", *extra):
    return simulate_helpers.run_simulate(
        f"--config.target={self.tmp}/{target}",
        f"--config.inputs={self.tmp}/X.npy",
        f"--config.out={self.tmp}/Y.npy",
        *extra,
    )

  def test_bad_target_file(self):
    w = dict(np.load(f"{self.tmp}/T.npz"))
    del w["wk"]
    np.savez(f"{self.tmp}/bad.npz", **w)
    cli_helpers.assert_one_line_error(
        self, self.run_files("bad.npz"), r"missing key.*wk"
    )
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.npy"))

  def test_bad_table_override(self):
    proc = simulate_helpers.run_simulate(
        "--config.grid=((2, 0, 4),)", f"--workdir={self.tmp}/table"
    )
    cli_helpers.assert_one_line_error(self, proc, r"L=0 must be a positive")
    self.assertFalse(os.path.exists(f"{self.tmp}/table"))

  def test_existing_output_is_kept(self):
    out = f"{self.tmp}/Y.npy"
    np.save(out, np.arange(3.0))
    before = open(out, "rb").read()
    cli_helpers.assert_one_line_error(
        self, self.run_files(), r"Y.npy already exists.*overwrite"
    )
    self.assertEqual(open(out, "rb").read(), before)
    self.assertFalse(os.path.exists(f"{self.tmp}/Y.json"))
    proc = self.run_files("T.npz", "--config.overwrite=True")
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(np.load(out).shape, (2, 3, 3))


if __name__ == "__main__":
  absltest.main()
