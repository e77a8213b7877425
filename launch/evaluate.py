r"""Evaluates a training workdir on a JSONL file made elsewhere.

  python -m launch.evaluate --workdir=/tmp/w --data=dyck.jsonl --out=report.json

One JSON object per line: {"text": "(()())", "label": 1} for Dyck
(1 = balanced), {"text": "abacab", "k": 2, "label": "_____b"} for k-hop.
Prints the accuracy; the report holds more (for Dyck, accuracy by length
bucket and by subset). A model of configs/dyck.py's default length scores any
string of up to 60 brackets. See ut/training/evaluate.py.
"""

from absl import flags

from launch import cli
from ut.training import evaluate

_WORKDIR = flags.DEFINE_string("workdir", None, "Training run folder.")
_DATA = flags.DEFINE_string("data", None, "JSONL file, one example per line.")
_OUT = flags.DEFINE_string("out", None, "Where to write the JSON report.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing --out.")


def main(argv):
  del argv
  report = evaluate.evaluate_jsonl(
      _WORKDIR.value, _DATA.value, _OUT.value, overwrite=_OVERWRITE.value
  )
  print(evaluate.summary_line(report))
  print(
      f"report in {_OUT.value}"
      if _OUT.value
      else "no report written (pass --out=REPORT.json to keep one)"
  )


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir", "data"])
  cli.run(main)
