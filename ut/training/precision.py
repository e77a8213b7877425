"""The matmul precision of a run's steps: one config field, `config.precision`.

Every matmul a run traces (training steps, evaluation, the compiled-UT rows)
runs under `jax.default_matmul_precision(config.precision)`. The default is
"highest": float32 matmuls in full float32 on every backend. On a CPU that is
what XLA computes anyway (results are bit-identical to an unset precision,
tests/training/precision_test.py); on an A100/H100-class GPU JAX's own
default rounds float32 inputs to TF32 and on a TPU to bfloat16, so "default"
or "tensorfloat32" trades exactness for speed there. Rows compared with an
exact reference (the compiled UTs, the simulate-check) run at "highest"
whatever the field says.
"""

import jax

from ut.errors import UserError

# jax_default_matmul_precision's names that a run may ask for.
PRECISIONS = ("highest", "float32", "tensorfloat32", "bfloat16", "default")
DEFAULT = "highest"
# What the exact rows use (compiled UTs; the simulate-check passes HIGHEST).
EXACT = "highest"


def of(config):
  """config.precision (DEFAULT for a config without the field); a UserError
  names the valid values."""
  value = config.get("precision", DEFAULT)
  if value not in PRECISIONS:
    raise UserError(
        f"precision={value!r}; use one of {', '.join(PRECISIONS)} (the "
        "matmul precision of every step: 'highest' is full float32)"
    )
  return value


def scope(config):
  """A context in which JAX traces matmuls at config's precision."""
  return jax.default_matmul_precision(of(config))


def exact():
  """A context for rows compared with an exact reference."""
  return jax.default_matmul_precision(EXACT)
