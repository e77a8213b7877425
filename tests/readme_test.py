"""The README's result tables equal the results files (python -m launch.readme)."""

import os

from absl.testing import absltest

from launch import readme


class ReadmeTest(absltest.TestCase):

  def test_tables_are_fresh(self):
    with open(os.path.join(readme.ROOT, "README.md")) as f:
      text = f.read()
    self.assertIn("<!-- include: results/dyck/paper.md -->", text)
    self.assertEqual(readme.render(text), text,
                     "README tables differ from results/: run python -m launch.readme")

  def test_render_includes_file_verbatim(self):
    tmp = self.create_tempdir()
    tmp.create_file("r/t.md", content="| a |\n|---|\n| 0.125 |\n")
    text = "x\n<!-- include: r/t.md -->\nold\n<!-- end include -->\ny\n"
    self.assertEqual(readme.render(text, root=tmp.full_path),
                     "x\n<!-- include: r/t.md -->\n```\n| a |\n|---|\n| 0.125 |\n"
                     "```\n<!-- end include -->\ny\n")


if __name__ == "__main__":
  absltest.main()
