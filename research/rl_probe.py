"""RL probe on the shipped spatial base: python research/rl_probe.py NAME '{TrainParams overrides}' [N_EVAL]
Trains with the project's train entry (LoRA, the RL world's train split), then measures cell_report on N_EVAL held-out
examples per task of the pretraining world (images seen by neither pretraining nor RL)."""
import sys, json, time, os
import numpy as np, torch
from dataclasses import replace
from consistency_amp.training.train import TrainParams, run_training
from consistency_amp.training.models import load_model
from consistency_amp.training.pretraining import BaseRecipe, pretraining_examples
from consistency_amp.evaluation.base_report import cell_report
torch.set_num_threads(1)
name, over = sys.argv[1], json.loads(sys.argv[2]); n = int(sys.argv[3]) if len(sys.argv) > 3 else 60
t0 = time.time()
if over.get("steps", 1) > 0:
    run = run_training(TrainParams(model="spatial-base-large", run_name=name, runs_dir=os.environ.get("RUNS", "/tmp/rl_probe_runs"), save_steps=0, **over))
    model, processor = load_model("spatial-base-large", lora=False, adapter=run / "adapter")
else:
    model, processor = load_model("spatial-base-large", lora=False)
train_secs = time.time() - t0
_, val = pretraining_examples(BaseRecipe())
rng = np.random.default_rng(0); by_task = {}
for i in rng.permutation(len(val)):
    e = val[i]; by_task.setdefault(e.task, [])
    if len(by_task[e.task]) < n: by_task[e.task].append(e)
report = cell_report(model.eval(), processor, [e for v in by_task.values() for e in v], max_new_tokens=24)
print(report.round(3).to_string())
summary = dict(name=name, over=over, train_secs=round(train_secs), mean=round(report.groupby("task").accuracy.mean().mean(), 4),
               per_task=report.groupby("task").accuracy.mean().round(3).to_dict(),
               true_rate=[round(report.true_rate.min(), 3), round(report.true_rate.max(), 3)], format=round(report.format_rate.min(), 3))
print(json.dumps(summary), flush=True)
