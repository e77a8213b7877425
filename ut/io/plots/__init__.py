"""Result tables for the colabs: load, set beside the paper's numbers, plot.

Rows are passed in: those of a sweep's table.json (ut/experiments/sweep/tables.py:
task, kind, variant, data as a JSON string, seeds, accuracy_mean, accuracy_std
in [0, 1], runs; `sweep.finished_rows` reads a finished grid's) or of
compiled_ut.json (ut/training/trained_to_ut.py). Plotting functions return a matplotlib
Figure made without pyplot (no backend, no global state): a notebook saves it
with fig.savefig(path) and shows the PNG (IPython.display.Image).

`paper` maps (kind, variant), or (panel value, kind, variant) where the paper's
number holds for one panel only, to the paper's number as text in percent, e.g.
{("za", "random", "attn"): "94.4", ("random", "res_ln"): "85.7-96.1"}; the
numbers in the text (one, or a low-high range) are drawn on our bars.

The modules:
  tables.py              text tables beside the paper, and their rows' fields
  bars.py                accuracy bars (with the paper's numbers), compiled-UT bars
  lines.py               accuracy against width, against step (validation curves)
  learnability_figure.py accuracy against the noise on a compiled program
"""

from ut.io.plots.bars import accuracy_bars
from ut.io.plots.bars import bar_label
from ut.io.plots.bars import compiled_bars
from ut.io.plots.learnability_figure import learnability
from ut.io.plots.lines import against_width
from ut.io.plots.lines import curves
from ut.io.plots.lines import run_curves
from ut.io.plots.lines import unfinished_curves
from ut.io.plots.tables import beside_paper
from ut.io.plots.tables import held_out_accuracy
from ut.io.plots.tables import panel_value
from ut.io.plots.tables import paper_range
