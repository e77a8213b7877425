"""Executes the colabs/ notebooks headless at a chosen profile (nbclient).

Each notebook's first code cell holds the line `profile_line("full")`; `execute`
swaps it for the profile asked for and runs every cell in a kernel of this
Python interpreter (a kernelspec in a temporary folder: nothing is installed for
the user), with the repository root as working directory.
"""

import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile

from ut.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL = "ut-notebooks"
PROFILES = ("smoke", "full")


def names():
  """The notebooks in colabs/, by name (no .ipynb)."""
  return sorted(os.path.splitext(os.path.basename(p))[0]
                for p in glob.glob(os.path.join(ROOT, "colabs", "*.ipynb")))


def path(name):
  return os.path.join(ROOT, "colabs", f"{name}.ipynb")


def profile_line(profile):
  return f'profile = "{profile}"  #@param ["smoke", "full"]'


@contextlib.contextmanager
def kernel_specs():
  """A KernelSpecManager that knows one kernel: this interpreter."""
  from jupyter_client.kernelspec import KernelSpecManager  # pylint: disable=g-import-not-at-top
  folder = tempfile.mkdtemp(prefix="ut_kernels_")
  try:
    os.makedirs(os.path.join(folder, KERNEL))
    with open(os.path.join(folder, KERNEL, "kernel.json"), "w") as f:
      json.dump(dict(argv=[sys.executable, "-m", "ipykernel_launcher", "-f",
                           "{connection_file}"], display_name="ut",
                     language="python"), f)
    yield KernelSpecManager(kernel_dirs=[folder])
  finally:
    shutil.rmtree(folder)


def set_profile(nb, profile):
  """Sets the parameters cell (the first code cell) of nb to `profile`."""
  if profile not in PROFILES:
    raise UserError(f"profile={profile!r}; use one of {PROFILES}")
  code = [c for c in nb.cells if c.cell_type == "code"]
  if not code or profile_line("full") not in code[0].source.splitlines():
    raise UserError("the first code cell must be the parameters cell with "
                    f"exactly the line {profile_line('full')!r}")
  code[0].source = code[0].source.replace(profile_line("full"),
                                          profile_line(profile))
  return nb


def execute(nb, specs, *, timeout_s):
  """Runs every cell of nb in place (from the repository root); returns nb.

  Raises NotebookFailed (a UserError) naming the failing cell's error, a cell
  over timeout_s, or a kernel that died.
  """
  from jupyter_client import AsyncKernelManager  # pylint: disable=g-import-not-at-top
  import nbclient  # pylint: disable=g-import-not-at-top
  km = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
  client = nbclient.NotebookClient(nb, km=km, timeout=timeout_s,
                                   resources={"metadata": {"path": ROOT}})
  errors = nbclient.exceptions
  try:
    # cleanup_kc: shut the kernel down when done; nbclient leaves a kernel it
    # was handed running (each holds 0.5 GB and a share of a core until this
    # process exits).
    client.execute(cleanup_kc=True)
  except (errors.CellExecutionError, errors.CellTimeoutError,
          errors.DeadKernelError) as e:
    raise NotebookFailed(str(e).strip().splitlines()[-1], detail=str(e)) from None
  return nb


class NotebookFailed(UserError):
  """A notebook cell failed; `detail` holds nbclient's whole message."""

  def __init__(self, message, detail):
    super().__init__(message)
    self.detail = detail
