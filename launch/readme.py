"""Refreshes the README's result tables from the files that hold them.

  python -m launch.readme          # rewrite README.md in place
  python -m launch.readme --check  # exit 1 if a table is stale

A block `<!-- include: results/dyck/table.md -->` ... `<!-- end include -->`
holds that file's text verbatim, so the README matches the results to the digit.
"""

import os
import re
import sys

from absl import app
from absl import flags

_CHECK = flags.DEFINE_bool("check", False, "Only check; exit 1 when stale.")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- include: (\S+) -->\n)(.*?)(<!-- end include -->)",
                   re.DOTALL)


def render(text, root=ROOT):
  def fill(match):
    path = os.path.join(root, match.group(2))
    body = (open(path).read() if os.path.exists(path)
            else f"(not generated yet: {match.group(2)})\n")
    return match.group(1) + "```\n" + body.rstrip("\n") + "\n```\n" + match.group(4)
  return BLOCK.sub(fill, text)


def main(argv):
  del argv
  path = os.path.join(ROOT, "README.md")
  text = open(path).read()
  new = render(text)
  if _CHECK.value:
    if new != text:
      print("README.md tables are stale: run python -m launch.readme", file=sys.stderr)
      sys.exit(1)
    return
  with open(path, "w") as f:
    f.write(new)


if __name__ == "__main__":
  app.run(main)
