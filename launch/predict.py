r"""The prediction of a training workdir's model for one text.

  python -m launch.predict --workdir=/tmp/w --text="(()"
  python -m launch.predict --workdir=/tmp/k --text=abcabca --k=2

Prints the prediction beside the task's ground truth. See ut/training/evaluate.py.
"""

from absl import flags

from launch import cli
from ut.training import evaluate

_WORKDIR = flags.DEFINE_string("workdir", None, "Training run folder.")
_TEXT = flags.DEFINE_string("text", None, "Dyck parentheses or k-hop letters.")
_K = flags.DEFINE_integer(
    "k", None, "k-hop: hops (default: the model's fixed k)."
)


def main(argv):
  del argv
  result = evaluate.predict_text(_WORKDIR.value, _TEXT.value, k=_K.value)
  print(evaluate.prediction_line(result))


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir", "text"])
  cli.run(main)
