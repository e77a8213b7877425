r"""Executes the colabs at full size and saves them, outputs included.

  python -m launch.colabs --out=results/colabs
  python -m launch.colabs --notebooks=dyck,khop --out=results/colabs --overwrite

Needs the `colab` extra (pip install -e '.[colab]'). Each colabs/<name>.ipynb
runs from the repository root with profile "full": it shows the tables and
figures in results/ (and trains or compiles what is missing there, as it would
in Colab) and saves its PNGs beside them; the executed notebook is written to
<out>/<name>.ipynb. Run it after the tables are regenerated (launch.reproduce).
"""

import os

from absl import flags
from absl import logging

from launch import cli
from ut.errors import UserError
from ut.io import notebooks
from ut.io import reports

_OUT = flags.DEFINE_string(
    "out", "results/colabs", "Folder for the executed notebooks."
)
_NOTEBOOKS = flags.DEFINE_list(
    "notebooks", None, "Names in colabs/ (default: every notebook)."
)
_TIMEOUT_S = flags.DEFINE_integer("cell_timeout_s", 3600, "Seconds per cell.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace executed notebooks already in --out."
)


def main(argv):
  del argv
  try:
    import nbclient  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
    import nbformat  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UserError(
        "launch.colabs needs nbclient and nbformat: "
        "pip install -e '.[colab]'"
    ) from None
  found = notebooks.names()
  names = _NOTEBOOKS.value or found
  unknown = [n for n in names if n not in found]
  if unknown:
    raise UserError(
        f"no notebook colabs/{unknown[0]}.ipynb; choose from "
        f"{', '.join(found)}"
    )
  outs = [os.path.join(_OUT.value, f"{n}.ipynb") for n in names]
  reports.refuse_existing(outs, _OVERWRITE.value, flag="--overwrite")
  os.makedirs(_OUT.value, exist_ok=True)
  with notebooks.kernel_specs() as specs:
    for name, out in zip(names, outs):
      logging.info("executing colabs/%s.ipynb at profile full", name)
      nb = notebooks.set_profile(
          nbformat.read(notebooks.path(name), as_version=4), "full"
      )
      try:
        notebooks.execute(nb, specs, timeout_s=_TIMEOUT_S.value)
      except notebooks.NotebookFailed as e:
        raise UserError(f"colabs/{name}.ipynb failed: {e}") from None
      nbformat.write(nb, out)
      print(f"wrote {out}")


if __name__ == "__main__":
  cli.run(main)
