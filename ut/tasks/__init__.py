"""Task generators: deterministic numpy data for the paper's experiments.

`TASKS` maps a task name to its module; each module has `generate(...)` and
its vocabulary constants (see the module docstrings for shapes and examples).
"""

from ut.tasks import dyck
from ut.tasks import khop

TASKS = {'dyck': dyck, 'khop': khop}
