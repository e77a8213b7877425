"""ut.training.records: the config a workdir keeps, what may differ on a
resume (host settings) and what may not, and configs recorded before a field."""

import json
import os
import re

from absl.testing import absltest
from absl.testing import parameterized

from configs import cpu as cpu_config
from tests import cli_helpers
from tests import train_helpers
from tests import xla_settings
from ut.errors import UserError
from ut.training import records
from ut.training import train


class TrainAndEvaluateTest(xla_settings.FastCompile, parameterized.TestCase):
  """Smoke training, where the loop is the point: most XLA optimizations
  off (tests/xla_settings.py)."""

  def test_stored_config_drops_host_settings(self):
    config = json.loads(
        cpu_config.overlay(train_helpers.smoke_config()).to_json_best_effort()
    )
    want = json.loads(train_helpers.smoke_config().to_json_best_effort())
    self.assertIn("cpu", config)
    self.assertEqual(records.stored_config(config), want)

  def test_run_resumes_on_other_host_settings_but_not_another_config(self):
    workdir = self.create_tempdir().full_path
    first = train.train_and_evaluate(
        train_helpers.smoke_config(steps=2), workdir
    )
    # Resumed as launch.train runs it on CPU: nothing left but the evaluation.
    again = train.train_and_evaluate(
        cpu_config.overlay(train_helpers.smoke_config(steps=2)), workdir
    )
    for key in train_helpers.FINAL_KEYS:
      self.assertEqual(again[key], first[key], key)
    # A field of the run still has to match.
    cli_helpers.assert_user_error(
        self,
        r"differs in train.lr\)",
        train.train_and_evaluate,
        train_helpers.smoke_config(steps=2, lr=0.5),
        workdir,
    )

  def test_a_record_without_a_field_of_todays_config_is_another_config(self):
    workdir = self.create_tempdir().full_path
    config = train_helpers.smoke_config(steps=2)
    self.assertEqual(config.model.kind, "sparse")
    train.train_and_evaluate(config, workdir)
    path = os.path.join(workdir, "config.json")
    old = train_helpers.read_json(path)
    del old["model"]["impl"]  # As sparse runs recorded it before the redesign.
    with open(path, "w") as f:
      json.dump(old, f)
    cli_helpers.assert_user_error(
        self,
        r"holds a run with a different config \(differs in model.impl\)",
        train.train_and_evaluate,
        config,
        workdir,
    )
    self.assertNotIn("impl", records.load_config(workdir).model)

  def test_sparse_run_from_a_config_without_impl_resumes(self):
    config = train_helpers.smoke_config(steps=2)
    del config.model["impl"]  # A config built by hand, not by configs/common.
    workdir = self.create_tempdir().full_path
    first = train.train_and_evaluate(config, workdir)
    self.assertEqual(
        train_helpers.read_json(os.path.join(workdir, "config.json"))["model"][
            "impl"
        ],
        "auto",
    )
    again = train.train_and_evaluate(config, workdir)
    self.assertEqual(again["param_checksum"], first["param_checksum"])
    self.assertEqual(records.load_config(workdir).model.impl, "auto")

  def test_workdir_keeps_its_config(self):
    workdir = self.create_tempdir().full_path
    # An invalid config fails before it claims the workdir...
    bad = train_helpers.smoke_config(arg="variant=nope", steps=2)
    with self.assertRaisesRegex(UserError, "unknown variant 'nope'"):
      train.train_and_evaluate(bad, workdir)
    self.assertFalse(os.path.exists(os.path.join(workdir, "config.json")))
    # ...so that the corrected command can still use it.
    config = train_helpers.smoke_config(steps=2)
    train.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "metrics.json")) as f:
      metrics_text = f.read()
    other = train_helpers.smoke_config(arg="model=random", steps=2, lr=1e-3)
    with self.assertRaises(UserError) as cm:
      train.train_and_evaluate(other, workdir)
    differing = re.search(r"differs in ([^)]*)\)", str(cm.exception))
    self.assertIsNotNone(differing, str(cm.exception))
    fields = set(differing.group(1).split(", "))  # Dotted: the exact fields.
    self.assertEqual({f.split(".")[0] for f in fields}, {"model", "train"})
    self.assertContainsSubset({"model.kind", "train.lr"}, fields)
    self.assertIn("--workdir", str(cm.exception))
    # Nothing in the workdir was touched.
    self.assertEqual(
        train_helpers.read_json(os.path.join(workdir, "config.json")),
        json.loads(config.to_json_best_effort()),
    )
    with open(os.path.join(workdir, "metrics.json")) as f:
      self.assertEqual(f.read(), metrics_text)


if __name__ == "__main__":
  absltest.main()
