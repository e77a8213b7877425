"""Trained targets compiled into fixed UTs, evaluated with no gradient step.

Beyond the paper. A `trained` attention-only transformer of width d is a target
(DESIGN §1) with an embedding table [token; position] (V + T, d) and an
unembedding W (d, C). The simulation-core compilers give E_c (d, m) for a fixed
UT, so the UT's own tables are

  E_token = token @ E_c,  E_position = position @ E_c,  U = U_ut @ W,

with U_ut the UT's fixed read-out (the sparse UT's root-block selector, or the
Gaussian UT's random U). The UT then reproduces the target's logits up to
float32 rounding, so its predictions agree with the target's.
"""

import math
import os

from absl import logging
import jax
import numpy as np

from ut.core import bounds
from ut.core import compile as compile_lib
from ut.core import targets as targets_lib
from ut.core.constructions import gaussian
from ut.errors import UserError
from ut.io import reports
from ut.training import checkpoint
from ut.training import held_out
from ut.training import models
from ut.training import precision
from ut.training import train

# Random-UT width over the threshold N: exact at m = N, but cond(A) there is up
# to ~1e4 and float32 rounding grows with it; a wider UT is better conditioned.
M_FACTOR = 1.25


def target_from_params(params, spec):
  """The attention stack of a trained attn model as a `Target` (identity read-out)."""
  if spec.kind != "trained" or spec.variant != "attn":
    raise UserError(
        f"only attention-only trained models are targets (DESIGN §1); "
        f"got kind={spec.kind}, variant={spec.variant}: train with "
        f"model=trained,variant=attn"
    )
  layers = {k: np.asarray(v, np.float64) for k, v in params["layers"].items()}
  return targets_lib.Target(
      **layers, wu=np.eye(spec.width), causal=spec.causal, residual=False
  )


def compile_model(params, spec, construction, *, m_factor=M_FACTOR, seed=0):
  """UT params and spec that simulate a trained model: (ut_params, ut_spec, report)."""
  target = target_from_params(params, spec)
  h, num_layers, d = spec.num_heads, spec.num_layers, spec.width
  if construction == "sparse":
    ut_spec = models.ModelSpec(
        kind="sparse",
        variant="attn",
        vocab_size=spec.vocab_size,
        max_len=spec.max_len,
        num_classes=spec.num_classes,
        num_heads=h,
        num_layers=num_layers,
        width=d,
        causal=spec.causal,
    )
    program, report = compile_lib.compile_sparse(ut_spec.sparse_ut, target)
    u_ut = np.zeros((ut_spec.model_width, d))
    u_ut[:d] = np.eye(d)  # U selects the state root, block 0.
    layers = None
  elif construction == "random":
    n = bounds.random_threshold(h, num_layers, d)
    m = math.ceil(m_factor * n)
    ut_spec = models.ModelSpec(
        kind="random",
        variant="attn",
        vocab_size=spec.vocab_size,
        max_len=spec.max_len,
        num_classes=spec.num_classes,
        num_heads=h,
        num_layers=num_layers,
        m=m,
        head_width=d,
        causal=spec.causal,
        ut_seed=seed,
    )
    # The float32 weights the model runs with, seen exactly in float64.
    ut = {
        k: np.asarray(v, np.float32).astype(np.float64)
        for k, v in gaussian.make_gaussian_ut(
            h, num_layers, m, d, seed, out_width=d
        ).items()
    }
    program, report = compile_lib.compile_random(ut, target)
    u_ut = ut["unembed"]
    layers = {k: np.asarray(ut[k], np.float32) for k in ("wq", "wk", "wv")}
  else:
    raise UserError(
        f"unknown construction {construction!r}; use sparse or random"
    )
  e_c = program["embed"]
  ut_params = {
      "embed": {
          "token": np.asarray(params["embed"]["token"], np.float64) @ e_c,
          "position": np.asarray(params["embed"]["position"], np.float64) @ e_c,
      },
      "unembed": u_ut @ np.asarray(params["unembed"], np.float64),
  }
  ut_params = jax.tree.map(lambda a: np.asarray(a, np.float32), ut_params)
  if layers is not None:
    ut_params["layers"] = layers
  return ut_params, ut_spec, report


def predictions(params, spec, batches):
  apply = jax.jit(lambda p, t: models.apply(p, spec, t).argmax(-1))
  return [np.asarray(apply(params, b["tokens"])) for b in batches]


def compare(target_preds, ut_preds, batches):
  """Accuracies of both and the share of identical predictions (scored positions)."""
  mask = np.concatenate([b["mask"].ravel() for b in batches])
  labels = np.concatenate([b["labels"].ravel() for b in batches])
  tp = np.concatenate([p.ravel() for p in target_preds])[mask]
  up = np.concatenate([p.ravel() for p in ut_preds])[mask]
  labels = labels[mask]
  return dict(
      target_accuracy=float(np.mean(tp == labels)),
      ut_accuracy=float(np.mean(up == labels)),
      agreement=float(np.mean(tp == up)),
      num_scored=int(mask.sum()),
  )


def _row(params, spec, batches, target_preds, construction, m_factor, seed):
  ut_params, ut_spec, creport = compile_model(
      params, spec, construction, m_factor=m_factor, seed=seed
  )
  row = dict(
      construction=construction,
      m=ut_spec.model_width,
      N=bounds.random_threshold(spec.num_heads, spec.num_layers, spec.width),
      cond=None if construction == "sparse" else creport.cond,
      **compare(
          target_preds, predictions(ut_params, ut_spec, batches), batches
      ),
  )
  logging.info(
      "%s UT (m=%d): target acc %.4f, UT acc %.4f, agreement %.5f",
      construction,
      row["m"],
      row["target_accuracy"],
      row["ut_accuracy"],
      row["agreement"],
  )
  return row


def sweep_run(config, target_dir):
  """One compiled-UT row of a sweep table: config.compiled names the UT
  (a random one of width M_FACTOR N, Gaussian seed config.model.ut_seed).

  The target is config with `compiled` cleared, trained in target_dir (or
  restored from it when its training finished there before). Returns the
  sweep's metrics: eval_accuracy is the UT's, next to the target's accuracy and
  the share of identical predictions.
  """
  target_config = config.copy_and_resolve_references()
  target_config.compiled = ""
  done = os.path.exists(os.path.join(target_dir, "metrics.json"))
  if not done:
    train.train_and_evaluate(target_config, target_dir)
  params, spec, tconfig, task, step = checkpoint.restore_params(target_dir)
  batches = held_out.eval_batches(tconfig, task)
  with precision.exact():
    row = _row(
        params,
        spec,
        batches,
        predictions(params, spec, batches),
        config.compiled,
        M_FACTOR,
        config.model.ut_seed,
    )
  return dict(
      row,
      step=step,
      eval_accuracy=row["ut_accuracy"],
      task=config.task,
      kind=f"compiled_{config.compiled}",
      variant=spec.variant,
      model_width=row["m"],
      target_dir=target_dir,
  )


def run(config, workdir):
  """Trains (or resumes) the target, compiles it into each UT, evaluates, reports."""
  target_dir = os.path.join(workdir, "target")
  report_path = os.path.join(workdir, "compiled_ut.json")
  reports.refuse_existing([report_path], config.overwrite)
  target_config = config.target_config
  train.train_and_evaluate(target_config, target_dir)
  params, spec, tconfig, task, step = checkpoint.restore_params(target_dir)
  batches = held_out.eval_batches(tconfig, task)
  rows = []
  with precision.exact():
    target_preds = predictions(params, spec, batches)
    for construction in config.constructions:
      rows.append(
          _row(
              params,
              spec,
              batches,
              target_preds,
              construction,
              config.m_factor,
              config.ut_seed,
          )
      )
  result = dict(
      rows=rows,
      target_step=step,
      task=tconfig.task,
      target_width=spec.width,
      heads=spec.num_heads,
      layers=spec.num_layers,
      provenance=reports.provenance(config),
  )
  reports.write_json(report_path, result)
  reports.write_text(
      os.path.join(workdir, "compiled_ut.md"),
      reports.format_table(rows, floatfmt="{:.5g}") + "\n",
  )
  return result
