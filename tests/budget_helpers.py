"""Sweep folders of made-up runs, for the budget tests."""

import json
import os

SUCCESS_STOP = "accuracy >= 0.995 at 2 evaluations in a row"
PLATEAU_STOP = (
    "plateau: best accuracy of the last 5 evaluations 0.9, before 0.9"
)


def write_run(sweep, seed, accs, *, batch=10, steps=None, stop=None, **model):
  """A run folder as launch.sweep writes it: evaluations at steps 1, 2, ...
  with accuracies `accs`; its step cap `steps` (default: its last step)."""
  model = {"kind": "sparse", "variant": "attn", **model, "ut_seed": seed}
  config = dict(
      seed=seed,
      task="khop",
      model=model,
      train=dict(batch_size=batch, steps=steps or len(accs), warmup_steps=1),
      data=dict(k=2),
      compiled="",
  )
  name = f"model={model['kind']},variant={model['variant']},seed={seed}"
  name += f",steps={config['train']['steps']}"
  metrics = dict(
      name=name,
      step=len(accs),
      stopped_early=stop,
      curve=[[i + 1, a] for i, a in enumerate(accs)],
      model_width=8,
      config=config,
  )
  folder = os.path.join(sweep, "runs", name)
  os.makedirs(folder)
  with open(os.path.join(folder, "metrics.json"), "w") as f:
    json.dump(metrics, f)
