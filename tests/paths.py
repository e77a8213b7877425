"""Where the repository is, for a test at any depth under tests/."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
