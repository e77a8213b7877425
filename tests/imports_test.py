"""Dependencies run one way: ut/core never imports ut/cpu, ut/cpu never imports
ut/training, ut/io never imports ut/experiments, and none dodges a cycle with
a function-level import. Configs are data: they import nothing from ut/io or
ut/experiments and open no file."""

import ast
import os

from absl.testing import absltest
from absl.testing import parameterized

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def imports(path):
  """(module imported, at module level?) for every import in a file."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  top = set(map(id, tree.body))
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      names = [f"{node.module}.{a.name}" for a in node.names]
    else:
      continue
    out.extend((name, id(node) in top) for name in names)
  return out


def file_reads(path):
  """The calls in a file that read files: open(), *.load/loads, glob."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  out = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
      out.append("open")
    elif isinstance(func, ast.Attribute) and (
        func.attr in ("load", "loads", "open", "glob", "exists", "isfile")
    ):
      owner = func.value.id if isinstance(func.value, ast.Name) else "?"
      out.append(f"{owner}.{func.attr}")
  return out


def package_files(package):
  folder = os.path.join(ROOT, *package.split("."))
  for dirpath, _, files in os.walk(folder):
    for name in sorted(files):
      if name.endswith(".py"):
        yield os.path.relpath(os.path.join(dirpath, name), ROOT)


class ImportsTest(parameterized.TestCase):

  @parameterized.parameters(
      ("ut.core", "ut.cpu"),
      ("ut.core", "ut.training"),
      ("ut.cpu", "ut.training"),
      ("ut.io", "ut.experiments"),  # Data flows experiments -> io.
  )
  def test_package_never_imports(self, package, forbidden):
    files = list(package_files(package))
    self.assertNotEmpty(files)
    for path in files:
      for name, _ in imports(os.path.join(ROOT, path)):
        self.assertFalse(
            name == forbidden or name.startswith(forbidden + "."),
            f"{path} imports {name}",
        )

  @parameterized.parameters("ut.core", "ut.cpu", "ut.training")
  def test_ut_imports_are_at_module_level(self, package):
    for path in package_files(package):
      for name, at_top in imports(os.path.join(ROOT, path)):
        if name.startswith("ut."):
          self.assertTrue(at_top, f"{path} imports {name} inside a function")

  def test_configs_import_no_library_io_and_open_no_file(self):
    files = sorted(
        os.path.join("configs", n)
        for n in os.listdir(os.path.join(ROOT, "configs"))
        if n.endswith(".py")
    )
    self.assertNotEmpty(files)
    forbidden = ("ut.io", "ut.experiments", "json", "glob")
    for path in files:
      for name, _ in imports(os.path.join(ROOT, path)):
        for bad in forbidden:
          self.assertFalse(
              name == bad or name.startswith(bad + "."),
              f"{path} imports {name}",
          )
      self.assertEqual(file_reads(os.path.join(ROOT, path)), [], path)

  def test_file_read_checker_sees_reads(self):
    # Not vacuous: ut/experiments/selection.py opens and loads metrics.json.
    found = file_reads(os.path.join(ROOT, "ut", "experiments", "selection.py"))
    self.assertIn("open", found)
    self.assertIn("json.load", found)

  def test_checker_sees_imports(self):
    # Not vacuous: the model's implementation switch imports the CPU forward
    # at module level.
    found = imports(os.path.join(ROOT, "ut", "training", "implementation.py"))
    self.assertIn(("ut.cpu.forward", True), found)

  def test_training_meets_cpu_in_the_implementation_switch_only(self):
    for path in package_files("ut.training"):
      if path == os.path.join("ut", "training", "implementation.py"):
        continue
      for name, _ in imports(os.path.join(ROOT, path)):
        self.assertFalse(
            name == "ut.cpu" or name.startswith("ut.cpu."),
            f"{path} imports {name}",
        )


if __name__ == "__main__":
  absltest.main()
