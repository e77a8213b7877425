"""The learnability gap (beyond the paper): does training find a program that
provably exists?

A trained attention-only target is compiled into the sparse UT and a random UT
(`trained_to_ut.compile_model`): E_c and U_c make the UT compute the target's
logits, so the UT scores the target's accuracy with no gradient step. The same
UTs are then trained (E and U only) from

  * a random start (the table's initialisation), and
  * E_c plus Gaussian noise of relative size s: every entry of each table
    (token, position) gets s * rms(table) * N(0, 1), so that the noise's
    Frobenius norm is about s times the table's; U starts at U_c.

s = 0 is the control: does training at this learning rate keep the program?
The figure is the final test accuracy against s, one line per UT, with the
from-scratch runs and the compiled program marked.

Layout of a workdir:
  target/               the target's training run (train_and_evaluate)
  programs/<ut>.npz     E_c and U_c of each UT
  runs/<ut>_<start>_seed=<s>/   one UT training run (init.npz: its start)
  learnability.{json,md,png}    the table and the figure

The modules, in the order data flows through them:
  runs.py        one UT run: its config, its start (E_c + noise) and training
  report.py      learnability.{json,md,png} and when one may be written
  experiment.py  `run`, the whole experiment, and `check_config`
"""

from ut.experiments.learnability.experiment import check_config
from ut.experiments.learnability.experiment import run
from ut.experiments.learnability.report import markdown
from ut.experiments.learnability.runs import noisy_program
from ut.experiments.learnability.runs import SCRATCH
from ut.experiments.learnability.runs import start_name
from ut.experiments.learnability.runs import ut_config
