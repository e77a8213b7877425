"""The whole learnability experiment (`run`) and its config's check."""

import math
import os

from absl import logging
import ml_collections
import numpy as np

from ut.errors import UserError
from ut.experiments.learnability import report as report_lib
from ut.experiments.learnability import runs as runs_lib
from ut.io import roofline as roofline_lib
from ut.training import held_out
from ut.training import optimizer
from ut.training import trained_to_ut as compiled


def run(config, workdir):
  """The whole experiment, resumable: every finished run is kept.

  Every UT is compiled and scored first; the runs then go cheapest first
  (the sparse UT's before the random UT's; per UT, noise sizes ascending and
  the random start last), and the report is written
  after each row of runs, with the rows still to run listed as pending. A
  report with pending rows is continued by running the same command again;
  a finished one is replaced only with config.overwrite. With
  config.report_only nothing trains: the report holds the rows whose runs
  are all finished and lists the others as pending.
  """
  check_config(config)
  paths = [os.path.join(workdir, f"learnability.{e}") for e in ("json", "md")]
  report_lib._check_continuation(
      report_lib._read_if_exists(paths[0]), config, paths
  )
  params, spec, tconfig, task, step = runs_lib._ensure_target(config, workdir)
  tbatches = held_out.eval_batches(tconfig, task, "test")
  target_preds = compiled.predictions(params, spec, tbatches)
  programs, compiled_uts = {}, {}
  for construction in config.constructions:
    ut_params, ut_spec, creport = compiled.compile_model(
        params,
        spec,
        construction,
        m_factor=config.m_factor,
        seed=config.ut_seed,
    )
    compiled_uts[construction] = (ut_params, ut_spec)
    runs_lib._save_program(
        os.path.join(workdir, "programs", f"{construction}.npz"), ut_params
    )
    programs[construction] = dict(
        m=ut_spec.model_width,
        cond=getattr(creport, "cond", None),
        # The scale of the program's E beside a random start's (embed_scale).
        e_rms=math.sqrt(
            np.mean(
                np.concatenate(
                    [np.ravel(a) for a in ut_params["embed"].values()]
                )
                ** 2
            )
        ),
        **compiled.compare(
            target_preds,
            compiled.predictions(ut_params, ut_spec, tbatches),
            tbatches,
        ),
    )
    logging.info("%s program: %s", construction, programs[construction])
  # The table's order: per UT, the random start, then the noise sizes.
  starts = ([None] if config.get("scratch", True) else []) + sorted(
      config.noises
  )
  order = [(c, noise) for c in config.constructions for noise in starts]
  rows, per_run = {}, {}
  target = dict(
      step=step,
      test_accuracy=runs_lib._read(
          os.path.join(workdir, "target", "metrics.json")
      ).get("test_accuracy"),
      width=spec.width,
      heads=spec.num_heads,
      layers=spec.num_layers,
      head_width=spec.head_width,
  )
  # The machine's speed when this command ran (the runs' own times are in
  # each row's train_minutes).
  gflops = roofline_lib.rate(roofline_lib.make())[0] / 1e9
  # The sparse UT's runs cost minutes, the random UT's (m x m maps) hours.
  cheapest_first = sorted(
      order, key=lambda o: (o[0] == "random", o[1] is None, o[1] or 0)
  )
  write = lambda: report_lib._write_report(
      config,
      workdir,
      paths,
      dict(target=target, programs=programs),
      order,
      rows,
      per_run,
      gflops,
  )
  result = None
  for construction, noise in cheapest_first:
    ut_params, ut_spec = compiled_uts[construction]
    if config.get("report_only") and not all(
        runs_lib._finished(workdir, construction, noise, s)
        for s in config.seeds
    ):
      continue  # Stays pending: report_only trains nothing.
    results = [
        runs_lib._run(
            config, workdir, construction, ut_params, ut_spec, noise, s
        )
        for s in config.seeds
    ]
    per_run.update({r["name"]: r["test_accuracy"] for r in results})
    rows[construction, noise] = report_lib._row(
        construction, ut_spec, noise, results
    )
    result = write()
  # With report_only and no row finished: the programs, every row pending.
  return write() if result is None else result


def check_config(config):
  """A UserError naming the first field of a learnability config that
  cannot work."""
  t = config.target
  if t.model.kind != "trained" or t.model.variant != "attn":
    raise UserError(
        f"config.target must train an attention-only model (model.kind="
        f"trained, model.variant=attn); got {t.model.kind}/{t.model.variant}"
    )
  constructions = tuple(config.constructions)
  if not constructions or len(set(constructions)) != len(constructions):
    raise UserError(
        f"config.constructions={constructions!r}; use sparse and/or random, "
        "each once"
    )
  for c in constructions:
    if c not in ("sparse", "random"):
      raise UserError(
          f"config.constructions has {c!r}; use sparse and/or random"
      )
  for s in config.noises:
    if (
        isinstance(s, bool)
        or not isinstance(s, (int, float))
        or not (0 <= s < math.inf)
    ):
      raise UserError(
          f"config.noises has {s!r}; use numbers >= 0 (relative noise sizes)"
      )
  if len({runs_lib.start_name(s) for s in config.noises}) != len(config.noises):
    raise UserError(
        f"config.noises={tuple(config.noises)!r}; use distinct noise sizes"
    )
  if not config.noises and not config.get("scratch", True):
    raise UserError(
        "config.noises is empty and config.scratch is False: no run to "
        "train; give noise sizes or set config.scratch=True"
    )
  for c in constructions:
    lr = config.lr.get(c)
    if (
        isinstance(lr, bool)
        or not isinstance(lr, (int, float))
        or not (math.isfinite(lr) and lr > 0)
    ):
      raise UserError(
          f"config.lr.{c}={lr!r}; use a learning rate > 0 for each UT"
      )
  if not config.seeds or len(set(config.seeds)) != len(config.seeds):
    raise UserError(
        f"config.seeds={tuple(config.seeds)!r}; use distinct seeds, e.g. 0,1,2"
    )
  if not isinstance(config.ut, ml_collections.ConfigDict) or "train" not in (
      config.ut
  ):
    raise UserError(
        "config.ut must be a training config (the UT runs' protocol)"
    )
  optimizer.check_schedule(config.ut)
