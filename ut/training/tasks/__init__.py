"""Task generators: deterministic numpy data for the paper's experiments.

`GENERATORS` maps a task name to its module; each module has `generate(...)` and
its vocabulary constants (see the module docstrings for shapes and examples).
"""

from ut.training.tasks import dyck
from ut.training.tasks import khop

GENERATORS = {"dyck": dyck, "khop": khop}
