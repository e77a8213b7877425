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
"""

import json
import math
import os

from absl import logging
import ml_collections
import numpy as np

from ut.errors import UserError
from ut.experiments.sweep import tables
from ut.io import plots
from ut.io import reports
from ut.io import roofline as roofline_lib
from ut.training import data as data_lib
from ut.training import train
from ut.training import trained_to_ut as compiled

SCRATCH = "scratch"


def noisy_program(program, noise, seed):
  """E_c with Gaussian noise of relative size `noise` per table, U_c as is:
  the flat {"embed/token", "embed/position", "unembed"} of an init .npz."""
  rng = np.random.default_rng(seed)
  out = {"unembed": np.asarray(program["unembed"], np.float32)}
  for name in ("token", "position"):
    e = np.asarray(program["embed"][name], np.float64)
    rms = math.sqrt(float(np.mean(e**2)))
    out[f"embed/{name}"] = (
        e + noise * rms * rng.standard_normal(e.shape)
    ).astype(np.float32)
  return out


def start_name(noise):
  return SCRATCH if noise is None else f"noise={noise:g}"


def ut_config(config, ut_spec, construction, seed):
  """The training config of one UT run: config.ut (the UTs' protocol) with
  the target's task and data, the UT's kind and shapes (ut_spec) and `seed`."""
  c = config.ut.copy_and_resolve_references()
  c.task = config.target.task
  c.data = config.target.data.copy_and_resolve_references()
  c.seed = seed
  c.model.kind = construction
  c.model.variant = "attn"
  c.model.ut_seed = config.ut_seed
  c.model.num_heads = ut_spec.num_heads
  c.model.num_layers = ut_spec.num_layers
  if construction == "sparse":
    c.model.width = ut_spec.width
    c.model.mlp_width = 0
  else:
    c.model.m = ut_spec.m
    c.model.head_width = ut_spec.head_width
  c.compiled = ""
  c.train.lr = config.lr[construction]
  return c


def _ensure_target(config, workdir):
  target_dir = os.path.join(workdir, "target")
  if not os.path.exists(os.path.join(target_dir, "metrics.json")):
    train.train_and_evaluate(config.target, target_dir)
  return train.restore_params(target_dir)


def _save_program(path, params):
  """The program as an init .npz (`config.train.init_params`' form); a file
  holding the same arrays is left as it is."""
  program = noisy_program(params, 0.0, seed=0)
  if os.path.exists(path):
    with np.load(path) as saved:
      if sorted(saved.files) == sorted(program) and all(
          np.array_equal(saved[k], v) for k, v in program.items()
      ):
        return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  np.savez(path, **program)


def _read(path):
  with open(path) as f:
    return json.load(f)


def _run_dir(workdir, construction, noise, seed):
  return os.path.join(
      workdir, "runs", f"{construction}_{start_name(noise)}_seed={seed}"
  )


def _finished(workdir, construction, noise, seed):
  """Whether the run has its metrics and its start's accuracy recorded."""
  run_dir = _run_dir(workdir, construction, noise, seed)
  return all(
      os.path.exists(os.path.join(run_dir, f))
      for f in ("metrics.json", "start.json")
  )


def _check_recorded_config(config, run_dir):
  """A UserError if a finished run was trained with another config than
  `config` (its warm start's path aside): e.g. at another learning rate."""
  path = os.path.join(run_dir, "config.json")
  if not os.path.exists(path):
    raise UserError(
        f"{run_dir} has metrics.json but no config.json: its config is "
        "unknown; move that run folder away to train it again"
    )
  recorded = train.stored_config(_read(path))
  now = train.stored_config(json.loads(config.to_json_best_effort()))
  for c in (recorded, now):
    c.get("train", {}).pop("init_params", None)
  diff = train.config_diff(recorded, now)
  if diff:
    raise UserError(
        f"{run_dir} was trained with another config (differs in "
        f"{', '.join(diff[:4])}); move that run folder away to train it again"
    )


def _run(config, workdir, construction, ut_params, ut_spec, noise, seed):
  """Trains (or resumes) one UT run; returns its metrics.json with its name
  and the start's test accuracy (start.json) added."""
  run_dir = _run_dir(workdir, construction, noise, seed)
  name = os.path.basename(run_dir)
  os.makedirs(run_dir, exist_ok=True)
  c = ut_config(config, ut_spec, construction, seed)
  start_path = os.path.join(run_dir, "start.json")
  metrics_path = os.path.join(run_dir, "metrics.json")
  if os.path.exists(metrics_path):
    _check_recorded_config(c, run_dir)
  if noise is not None:
    init = os.path.join(run_dir, "init.npz")
    needed = not (os.path.exists(metrics_path) and os.path.exists(start_path))
    if needed and not os.path.exists(init):  # The same draw on every resume.
      np.savez(init, **noisy_program(ut_params, noise, seed))
    c.train.init_params = init
  if not os.path.exists(start_path):
    task = data_lib.make_task(c)
    spec = train.model_spec(c, task.info)
    start = train.init_state(c, spec)[0].params
    acc = train.test_metrics(start, spec, c, task)["test_accuracy"]
    logging.info("%s: test accuracy at the start %.4f", name, acc)
    reports.write_json(start_path, dict(start_accuracy=acc))
  if not os.path.exists(metrics_path):
    train.train_and_evaluate(c, run_dir)
  return dict(
      _read(metrics_path),
      **_read(start_path),
      name=name,
      train_minutes=tables.train_minutes(run_dir),
  )


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
  _check_continuation(_read_if_exists(paths[0]), config, paths)
  params, spec, tconfig, task, step = _ensure_target(config, workdir)
  tbatches = train.eval_batches(tconfig, task, "test")
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
    _save_program(
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
      test_accuracy=_read(os.path.join(workdir, "target", "metrics.json")).get(
          "test_accuracy"
      ),
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
  write = lambda: _write_report(
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
        _finished(workdir, construction, noise, s) for s in config.seeds
    ):
      continue  # Stays pending: report_only trains nothing.
    results = [
        _run(config, workdir, construction, ut_params, ut_spec, noise, s)
        for s in config.seeds
    ]
    per_run.update({r["name"]: r["test_accuracy"] for r in results})
    rows[construction, noise] = _row(construction, ut_spec, noise, results)
    result = write()
  # With report_only and no row finished: the programs, every row pending.
  return write() if result is None else result


def _write_report(config, workdir, paths, head, order, rows, runs, gflops):
  """learnability.{json,md,png} from the rows finished so far (in the
  table's order); the others are listed as pending."""
  pending = [(c, n) for c, n in order if (c, n) not in rows]
  name = lambda c, n: f"{c} {start_name(n)}"
  # Pending rows some of whose seeds have finished: {row: seeds finished}.
  done = {
      name(c, n): sum(_finished(workdir, c, n, s) for s in config.seeds)
      for c, n in pending
  }
  result = dict(
      **head,
      rows=[rows[o] for o in order if o in rows],
      pending=[name(c, n) for c, n in pending] or None,
      pending_seeds_done={row: k for row, k in done.items() if k},
      per_run=runs,
      dot_gflops=gflops,
      provenance=reports.provenance(config),
  )
  reports.write_json(paths[0], result)
  reports.write_text(paths[1], markdown(result))
  plots.learnability(result).savefig(
      os.path.join(workdir, "learnability.png"), dpi=120
  )
  return result


def _check_continuation(report, config, paths):
  """A UserError unless the report may be written: there is none yet, or
  config.overwrite, or it lists pending rows of this same configuration (a
  continuation; `overwrite` and `report_only` aside)."""
  if config.overwrite or not report:
    return
  saved = dict((report.get("provenance") or {}).get("config") or {})
  now = json.loads(config.to_json_best_effort())
  for field in ("overwrite", "report_only"):  # How to write, not what.
    saved.pop(field, None)
    now.pop(field, None)
  if report.get("pending") is None:
    reports.refuse_existing(paths, config.overwrite)
  if saved != now:
    raise UserError(
        f"{paths[0]} holds an unfinished run of another configuration; run "
        "that configuration again to continue it, or pass "
        "--config.overwrite=True to replace the report (finished runs are "
        "kept)"
    )


def _read_if_exists(path):
  """A report's JSON, or {} where there is none yet."""
  return _read(path) if os.path.exists(path) else {}


def _row(construction, ut_spec, noise, results):
  test = np.array([r["test_accuracy"] for r in results])
  start = np.array([r["start_accuracy"] for r in results])
  wins = [r for r in results if r["test_accuracy"] >= tables.SUCCESS]
  first = [r["steps_to_99"] for r in wins if r.get("steps_to_99") is not None]
  return dict(
      ut=construction,
      m=ut_spec.model_width,
      start=start_name(noise),
      noise=noise,
      seeds=len(results),
      start_mean=float(start.mean()),
      test_mean=float(test.mean()),
      test_std=tables.std(test),
      successes=len(wins),
      median_steps_to_99=float(np.median(first)) if first else None,
      max_steps=max(r["step"] for r in results),
      # On the CPU; runs trained on an accelerator count apart.
      **tables.device_minutes(
          [(r, r["train_minutes"]) for r in results], "train_minutes"
      ),
      runs=";".join(r["name"] for r in results),
  )


def markdown(result):
  t = result["target"]
  lines = [
      f"Target: trained attention-only, d={t['width']}, H={t['heads']}, "
      f"L={t['layers']}, head width {t['head_width']}; test accuracy "
      f"{100 * t['test_accuracy']:.2f}% (step {t['step']}).",
      "",
      "Compiled programs, no gradient step (test set of the target):",
      "",
      reports.format_table(
          [dict(ut=k, **v) for k, v in result["programs"].items()],
          floatfmt="{:.5g}",
      ),
      "",
      "Training E and U from a random start or from the compiled program "
      "plus noise (accuracies in %, test set of each run's seed):",
      "",
  ]
  table = []
  for r in result["rows"]:
    table.append(
        dict(
            ut=r["ut"],
            m=r["m"],
            start=r["start"],
            seeds=r["seeds"],
            start_acc=f"{100 * r['start_mean']:.1f}",
            test=reports.mean_std(r["test_mean"], r["test_std"]),
            **{"≥99%": f"{r['successes']}/{r['seeds']}"},
            median_step_to_99=reports.step(r["median_steps_to_99"]),
            max_steps=r["max_steps"],
            core_minutes=r["train_minutes"],
            **(
                {"on an accelerator": r["accelerator_runs"]}
                if any(x.get("accelerator_runs") for x in result["rows"])
                else {}
            ),
        )
    )
  lines.append(reports.format_table(table, floatfmt="{:.3g}"))
  if result.get("pending"):
    done = result.get("pending_seeds_done") or {}
    names = [
        f"{p} ({done[p]} seed{'s' * (done[p] > 1)} finished)"
        if p in done
        else p
        for p in result["pending"]
    ]
    lines += ["", f"Pending (not all seeds run yet): {', '.join(names)}."]
  total = sum(r["train_minutes"] for r in result["rows"])
  lines += [
      "",
      f"Training: {total:.0f} core-minutes in all (each run on one core; "
      f"its training steps, from its log). 2048^2 float32 matmul when this "
      f"command ran: {result['dot_gflops']:.0f} GFLOP/s.",
  ]
  gpu_runs = sum(r.get("accelerator_runs", 0) for r in result["rows"])
  if gpu_runs:
    names = {
        n for r in result["rows"] for n in r["accelerators"].split(";") if n
    }
    minutes = sum(r["accelerator_minutes"] for r in result["rows"])
    lines[-1] = lines[-1].replace(
        "core-minutes in all", "core-minutes on the CPU"
    ) + (
        f" {gpu_runs} run{'s' * (gpu_runs != 1)} trained on"
        f" {' and '.join(sorted(names))} instead (column 'on an"
        f" accelerator'): {minutes:.0f} minutes of their training steps"
        " (the accelerator may have been shared with other processes)."
    )
  return "\n".join(lines) + "\n"


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
  if len({start_name(s) for s in config.noises}) != len(config.noises):
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
  train.check_schedule(config.ut)
