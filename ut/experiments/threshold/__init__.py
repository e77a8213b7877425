"""The width threshold of random universal transformers (DESIGN §4, §5).

Shape glossary: G targets per point, B inputs per target, T tokens, d target
width, m UT width, N number of linear conditions, L layers, H heads.

For each target class (H, L, d) and each width m of a grid around N, a generic
target (`targets.init`) is compiled into a per-layer Gaussian UT of width m by
`compile.compile_random` (float64 least squares) and checked by `simulate.check`
on random inputs. Below N the least-squares E misses some conditions and the
error is O(0.1..1); from m = N on it is rounding (about 1e-13): a sharp
threshold. The paper proves that random UTs are universal almost surely at
m >= N and that attention-matching simulation needs m >= H^L / 2 (Theorem 4.1);
this plot goes beyond it.

`attention_maps` gives the per-layer attention matrices of a target or of a
dense UT with its program; `attention_comparison` and `plot_attention` set the
target's beside those of the sparse UT and of random UTs compiled from it.

The modules:
  curve.py      the threshold curve: `run`, its rows, summary and figure
  attention.py  attention maps of a target and of UTs compiled from it
"""

from ut.experiments.threshold.attention import attention_comparison
from ut.experiments.threshold.attention import attention_maps
from ut.experiments.threshold.attention import plot_attention
from ut.experiments.threshold.attention import target_params
from ut.experiments.threshold.curve import load
from ut.experiments.threshold.curve import OUTPUTS
from ut.experiments.threshold.curve import plot
from ut.experiments.threshold.curve import point
from ut.experiments.threshold.curve import random_targets
from ut.experiments.threshold.curve import run
from ut.experiments.threshold.curve import summary
from ut.experiments.threshold.curve import SUMMARY_POINTS
from ut.experiments.threshold.curve import sweep_paddings
from ut.experiments.threshold.curve import sweep_row
from ut.experiments.threshold.curve import widths
