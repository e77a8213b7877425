"""Refreshes the result tables of the README and docs/ from the files that hold them.

  python -m launch.readme          # rewrite README.md and docs/*.md in place
  python -m launch.readme --check  # exit 1 if a table is stale

A block `<!-- include: results/dyck/table.md -->` ... `<!-- end include -->`
holds that file's text verbatim, so the documents match the results to the digit.
"""

import glob
import os
import re
import sys

from absl import app
from absl import flags

_CHECK = flags.DEFINE_bool("check", False, "Only check; exit 1 when stale.")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(
    r"(<!-- include: (\S+) -->\n)(.*?)(<!-- end include -->)", re.DOTALL
)


def documents(root=ROOT):
  """The files whose include blocks are kept fresh, relative to root."""
  return ["README.md"] + sorted(
      os.path.relpath(p, root)
      for p in glob.glob(os.path.join(root, "docs", "*.md"))
  )


def render(text, root=ROOT):
  def fill(match):
    path = os.path.join(root, match.group(2))
    body = (
        open(path).read()
        if os.path.exists(path)
        else f"(not generated yet: {match.group(2)})\n"
    )
    return (
        match.group(1)
        + "```\n"
        + body.rstrip("\n")
        + "\n```\n"
        + match.group(4)
    )

  return BLOCK.sub(fill, text)


def main(argv):
  del argv
  stale = []
  for name in documents():
    path = os.path.join(ROOT, name)
    with open(path) as f:
      text = f.read()
    new = render(text)
    if new == text:
      continue
    stale.append(name)
    if not _CHECK.value:
      with open(path, "w") as f:
        f.write(new)
  if _CHECK.value and stale:
    print(
        f"tables are stale in {', '.join(stale)}: run python -m launch.readme",
        file=sys.stderr,
    )
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
