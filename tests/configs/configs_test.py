"""What holds across several config files: the selection sweeps use
validation seeds only, and the tables' literals are their selections'
choices."""

import json
import os

from absl.testing import absltest

from configs import dyck_table
from configs import khop_table
from configs import width
from tests import paths
from ut.experiments import sweep

ROOT = paths.ROOT


def _module(name):
  return sweep.load_config_module(os.path.join(ROOT, "configs", name))


def _chosen(folder):
  """results/<folder>/selection.json's choices, or None where it is absent."""
  path = os.path.join(ROOT, "results", folder, "selection.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)["chosen"]


class SelectionTest(absltest.TestCase):

  def test_selection_runs_use_validation_seeds_only(self):
    table_seeds = {0, 1, 2}
    for name, arg in (
        ("khop_select.py", None),
        ("khop_select.py", "part=uts"),
        ("dyck_select.py", None),
        ("width_select.py", None),
    ):
      runs = sweep.collect_runs(_module(name), arg)
      self.assertNotEmpty(runs)
      self.assertFalse({c.seed for _, c in runs} & table_seeds, name)
      self.assertGreater(len({c.train.lr for _, c in runs}), 1, name)


class LiteralsTest(absltest.TestCase):
  """The configs' chosen hyperparameters are their selection sweeps' choices
  (written as literals), where the selection is recorded."""

  def _expect(self, folder, literal, of_choice, keep=lambda c: True):
    chosen = _chosen(folder)
    if chosen is None:  # Not recorded in this checkout: nothing to compare.
      return
    self.assertEqual(
        literal, dict(of_choice(c) for c in chosen if keep(c)), folder
    )

  def test_each_literal_is_its_selection(self):
    lr_scale_schedule = lambda c: (
        c["lr"],
        c["embed_scale"],
        c.get("schedule", "constant"),
    )
    self._expect(
        "khop/select",
        khop_table.TRAINED,
        lambda c: ((c["variant"], c["data"]["k"]), lr_scale_schedule(c)),
    )
    self._expect(
        "khop/select_uts",
        khop_table.UTS,
        lambda c: (c["kind"], lr_scale_schedule(c)),
    )
    self._expect(
        "khop/select_batch",
        khop_table.BATCHES,
        lambda c: (
            (c["variant"], c["data"]["k"]),
            (c["batch_size"], c["warmup_steps"]),
        ),
        keep=lambda c: c["kind"] == "trained",
    )
    self._expect(
        "dyck/select",
        dyck_table.LRS,
        lambda c: ((c["kind"], c["variant"]), c["lr"]),
    )
    self._expect(
        "width/select", width.DYCK_LRS, lambda c: (c["width"], c["lr"])
    )


if __name__ == "__main__":
  absltest.main()
