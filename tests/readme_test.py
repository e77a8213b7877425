"""The README and docs/: fresh tables, a running example, resolving references.

- Every include block of README.md and docs/*.md equals its results file
  (python -m launch.readme).
- The README's Python example runs, in this process, and checks itself.
- The README stays short and starts with its two commands.
- Every "DESIGN §n" cited in the code names a section of docs/design.md.
"""

import glob
import os
import re

from absl.testing import absltest

from launch import readme

ROOT = readme.ROOT
MAX_README_LINES = 200
MAX_EXAMPLE_LINES = 15
# Where the code cites DESIGN: "DESIGN §3", "DESIGN §2-4, §6", "DESIGN.md §1-5".
CITATION = re.compile(r"DESIGN(?:\.md)?((?:,? ?§\d+(?:-\d+)?)+)")
SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)
CITING_FOLDERS = ("ut", "launch", "configs", "tests", "benchmarks", "colabs")


def _read(name):
  with open(os.path.join(ROOT, name)) as f:
    return f.read()


def python_example(text):
  """The body of the first ```python block of a markdown text."""
  match = re.search(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
  if match is None:
    raise ValueError("no ```python block")
  return match.group(1)


def cited_sections(text):
  """The section numbers cited as DESIGN §n in text (ranges expanded)."""
  out = set()
  for match in CITATION.finditer(text):
    for lo, hi in re.findall(r"§(\d+)(?:-(\d+))?", match.group(1)):
      out.update(range(int(lo), int(hi or lo) + 1))
  return out


class ReadmeTest(absltest.TestCase):

  def test_tables_are_fresh(self):
    names = readme.documents()
    self.assertContainsSubset(
        [
            "README.md",
            "docs/design.md",
            "docs/results.md",
            "docs/performance.md",
        ],
        names,
    )
    # The tables are shown, not only linked: the claims' in docs/results.md,
    # the simulation in the README, which links each claim's budget figure.
    for name, table in [
        ("README.md", "results/simulate/simulate_table.md"),
        ("docs/results.md", "results/dyck/paper.md"),
        ("docs/results.md", "results/khop/paper.md"),
        ("docs/results.md", "results/learnability/learnability.md"),
    ]:
      self.assertIn(f"<!-- include: {table} -->", _read(name))
    for figure in ("results/budget/dyck.png", "results/budget/khop.png"):
      self.assertIn(f"]({figure})", _read("README.md"))
    for name in names:
      text = _read(name)
      self.assertEqual(
          readme.render(text),
          text,
          f"{name}: tables differ from results/: run python -m launch.readme",
      )

  def test_render_includes_file_verbatim(self):
    tmp = self.create_tempdir()
    tmp.create_file("r/t.md", content="| a |\n|---|\n| 0.125 |\n")
    text = "x\n<!-- include: r/t.md -->\nold\n<!-- end include -->\ny\n"
    self.assertEqual(
        readme.render(text, root=tmp.full_path),
        "x\n<!-- include: r/t.md -->\n```\n| a |\n|---|\n| 0.125 |\n"
        "```\n<!-- end include -->\ny\n",
    )

  def test_documents_are_the_readme_and_docs(self):
    tmp = self.create_tempdir()
    tmp.create_file("README.md")
    tmp.create_file("docs/b.md")
    tmp.create_file("docs/a.md")
    tmp.create_file("docs/notes.txt")
    self.assertEqual(
        readme.documents(tmp.full_path), ["README.md", "docs/a.md", "docs/b.md"]
    )

  def test_readme_is_short_and_starts_with_its_two_commands(self):
    lines = _read("README.md").splitlines()
    self.assertLessEqual(
        len(lines),
        MAX_README_LINES,
        "the README is read, not searched (STYLE 17): move "
        "history and notes to docs/",
    )
    self.assertTrue(lines[0].startswith("# "), lines[0])
    self.assertEqual(lines[1], "")
    end = lines.index("```", 3)
    self.assertEqual(
        (lines[2], end),
        ("```", 5),
        "the README opens with a block of exactly two commands",
    )
    install_and_run, test = lines[3], lines[4]
    self.assertRegex(
        install_and_run,
        r"pip install -e \. && python -m launch\.simulate --config=configs/simulate\.py$",
    )
    self.assertRegex(
        test, r"pip install -e '\.\[test\]' && python -m pytest .*tests$"
    )
    self.assertNotRegex(
        test,
        r" -m ['\"]?not slow| -k ",
        "the README's test command runs the whole suite",
    )
    self.assertIn(
        'python -m pytest -q -n 2 -m "not slow" tests',
        "\n".join(lines[5:12]),
        "the fast command follows the two commands",
    )

  def test_readme_links_resolve(self):
    for target in re.findall(r"\]\(([^)#]+)\)", _read("README.md")):
      if "://" not in target:
        self.assertTrue(os.path.exists(os.path.join(ROOT, target)), target)

  def test_readme_example_runs(self):
    code = python_example(_read("README.md"))
    self.assertLessEqual(len(code.splitlines()), MAX_EXAMPLE_LINES)
    self.assertIn("assert ", code, "the example checks its own result")
    namespace = {"__name__": "readme_example"}
    exec(compile(code, "README.md example", "exec"), namespace)  # pylint: disable=exec-used
    self.assertEqual(namespace["ut"].m, 52)
    self.assertLess(namespace["result"]["float64"]["max_abs_err"], 1e-12)

  def test_python_example_extraction(self):
    text = "intro\n```\nshell\n```\n```python\nx = 1\nassert x == 2\n```\n"
    code = python_example(text)
    self.assertEqual(code, "x = 1\nassert x == 2\n")
    with self.assertRaises(AssertionError):  # A broken example fails the test.
      exec(code, {})  # pylint: disable=exec-used
    with self.assertRaisesRegex(ValueError, "no ```python block"):
      python_example("```\nshell\n```\n")

  def test_design_citations_resolve(self):
    sections = {int(n) for n in SECTION.findall(_read("docs/design.md"))}
    self.assertEqual(
        sections,
        set(range(1, max(sections) + 1)),
        "docs/design.md numbers its sections 1..n",
    )
    cited = {}
    for folder in CITING_FOLDERS:
      for path in glob.glob(
          os.path.join(ROOT, folder, "**", "*.*"), recursive=True
      ):
        if path.endswith((".py", ".ipynb", ".md")):
          with open(path) as f:
            for n in cited_sections(f.read()):
              cited.setdefault(n, os.path.relpath(path, ROOT))
    cited_in_docs = set()
    for name in readme.documents():
      cited_in_docs |= cited_sections(_read(name))
    self.assertContainsSubset({1, 2, 3, 4, 5, 6, 7}, set(cited))
    for n in set(cited) | cited_in_docs:
      self.assertIn(
          n,
          sections,
          f"DESIGN §{n} (cited in {cited.get(n, 'docs')}) "
          "is not a section of docs/design.md",
      )

  def test_cited_sections_parses_the_forms_in_use(self):
    self.assertEqual(
        cited_sections("(DESIGN §2-4, §6) and DESIGN §7."), {2, 3, 4, 6, 7}
    )
    self.assertEqual(
        cited_sections("DESIGN.md §1-5; DESIGN §4, §5"), {1, 2, 3, 4, 5}
    )
    self.assertEqual(cited_sections("DESIGN says about 93%"), set())


if __name__ == "__main__":
  absltest.main()
