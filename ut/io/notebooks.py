"""Executes the colabs/ notebooks headless at a chosen profile (nbclient).

Each notebook opens with two code cells:
  1. the setup cell, exactly `SETUP_CELL`: in Colab it clones the repository
     named by `UT_REPO` and installs `ut`; from a checkout it only moves to the
     repository root (it runs from `colabs/` too);
  2. the parameters cell, holding the line `profile_line("full")`.
`set_profile` swaps that line for the profile asked for, and `execute` runs
every cell in a kernel of this Python interpreter (a kernelspec in a temporary
folder: nothing is installed for the user), with the repository root as working
directory.
"""

import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile

from ut.errors import UserError

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
KERNEL = "ut-notebooks"
PROFILES = ("smoke", "full")


def names():
  """The notebooks in colabs/, by name (no .ipynb)."""
  return sorted(
      os.path.splitext(os.path.basename(p))[0]
      for p in glob.glob(os.path.join(ROOT, "colabs", "*.ipynb"))
  )


def path(name):
  return os.path.join(ROOT, "colabs", f"{name}.ipynb")


# The first code cell of every notebook. It cannot import `ut` (it installs it).
SETUP_CELL = """\
#@title Install `ut` and work from the repository root
#@markdown In Colab, set `UT_REPO` to this repository's git URL: the cell clones
#@markdown it and installs `ut`. From a checkout it only moves to its root.
UT_REPO = "<git URL of this repository>"  #@param {type:"string"}
import importlib.metadata
import os
import shutil
import subprocess
import sys


def _is_repo_root(path):
  return all(os.path.exists(os.path.join(path, name))
             for name in ("setup.cfg", "ut", "configs"))


if not _is_repo_root(".") and _is_repo_root(".."):
  os.chdir("..")  # Opened from a checkout's colabs/ folder.
if not _is_repo_root("."):  # Not in a checkout (Colab): clone one.
  if not _is_repo_root("ut_repo"):
    if "://" not in UT_REPO and not UT_REPO.startswith("git@"):
      raise ValueError(f"UT_REPO={UT_REPO!r}: set it to this repository's git "
                       "URL, or open the notebook from a checkout")
    subprocess.run(["git", "clone", "-q", "--depth=1", UT_REPO, "ut_repo"],
                   check=True)
  os.chdir("ut_repo")
try:
  importlib.metadata.version("ut")
except importlib.metadata.PackageNotFoundError:
  # On a GPU runtime, the pinned JAX with its CUDA 12 plugin (extra `gpu`).
  extra = "[gpu]" if shutil.which("nvidia-smi") else ""
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e",
                  "." + extra], check=True)
if os.getcwd() not in sys.path:  # ut/ and configs/ import without a restart.
  sys.path.insert(0, os.getcwd())
print("working in", os.getcwd())"""


def profile_line(profile):
  return f'profile = "{profile}"  #@param ["smoke", "full"]'


def parameters_cell(nb):
  """The parameters cell of nb: the code cell right after the setup cell."""
  code = [c for c in nb.cells if c.cell_type == "code"]
  if not code or code[0].source != SETUP_CELL:
    raise UserError(
        "the first code cell must be the setup cell, exactly "
        "ut.io.notebooks.SETUP_CELL"
    )
  if len(code) < 2 or profile_line("full") not in code[1].source.splitlines():
    raise UserError(
        "the second code cell must be the parameters cell with "
        f"exactly the line {profile_line('full')!r}"
    )
  return code[1]


@contextlib.contextmanager
def kernel_specs():
  """A KernelSpecManager that knows one kernel: this interpreter."""
  from jupyter_client.kernelspec import KernelSpecManager  # pylint: disable=g-import-not-at-top

  folder = tempfile.mkdtemp(prefix="ut_kernels_")
  try:
    os.makedirs(os.path.join(folder, KERNEL))
    with open(os.path.join(folder, KERNEL, "kernel.json"), "w") as f:
      json.dump(
          dict(
              argv=[
                  sys.executable,
                  "-m",
                  "ipykernel_launcher",
                  "-f",
                  "{connection_file}",
              ],
              display_name="ut",
              language="python",
          ),
          f,
      )
    yield KernelSpecManager(kernel_dirs=[folder])
  finally:
    shutil.rmtree(folder)


def set_profile(nb, profile):
  """Sets the parameters cell (`parameters_cell`) of nb to `profile`."""
  if profile not in PROFILES:
    raise UserError(f"profile={profile!r}; use one of {PROFILES}")
  cell = parameters_cell(nb)
  cell.source = cell.source.replace(profile_line("full"), profile_line(profile))
  return nb


def execute(nb, specs, *, timeout_s):
  """Runs every cell of nb in place (from the repository root); returns nb.

  Raises NotebookFailed (a UserError) naming the failing cell's error, a cell
  over timeout_s, or a kernel that died.
  """
  from jupyter_client import AsyncKernelManager  # pylint: disable=g-import-not-at-top
  import nbclient  # pylint: disable=g-import-not-at-top

  km = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
  client = nbclient.NotebookClient(
      nb, km=km, timeout=timeout_s, resources={"metadata": {"path": ROOT}}
  )
  errors = nbclient.exceptions
  try:
    # cleanup_kc: shut the kernel down when done; nbclient leaves a kernel it
    # was handed running (each holds 0.5 GB and a share of a core until this
    # process exits).
    client.execute(cleanup_kc=True)
  except (
      errors.CellExecutionError,
      errors.CellTimeoutError,
      errors.DeadKernelError,
  ) as e:
    raise NotebookFailed(
        str(e).strip().splitlines()[-1], detail=str(e)
    ) from None
  return nb


class NotebookFailed(UserError):
  """A notebook cell failed; `detail` holds nbclient's whole message."""

  def __init__(self, message, detail):
    super().__init__(message)
    self.detail = detail
