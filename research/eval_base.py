"""Evaluate a saved base against issue 8's band: python research/eval_base.py FOLDER [IPS] [N]"""
import sys, json
import numpy as np, torch
from dataclasses import replace
from transformers import AutoModelForImageTextToText
from consistency_amp.training.models import load_processor
from consistency_amp.training.pretraining import BaseRecipe, pretraining_examples
from consistency_amp.evaluation.base_report import cell_report, group_diversity, numeric_report
torch.set_num_threads(1)
folder, ips, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300, int(sys.argv[3]) if len(sys.argv) > 3 else 60
model = AutoModelForImageTextToText.from_pretrained(folder, torch_dtype=torch.float32).eval()
processor = load_processor(folder)
from pathlib import Path
from consistency_amp.world.tasks import BOOLEAN_TASKS
tasks = json.loads((Path(folder) / "recipe.json").read_text()).get("tasks", list(BOOLEAN_TASKS))   # the base's own tasks
_, val = pretraining_examples(replace(BaseRecipe(), images_per_source=ips, tasks=tuple(tasks)))
rng = np.random.default_rng(0)
by_task = {}
for i in rng.permutation(len(val)):
    e = val[i]; by_task.setdefault(e.task, [])
    if len(by_task[e.task]) < n: by_task[e.task].append(e)
examples = [e for t, v in by_task.items() if t in BOOLEAN_TASKS for e in v]
numeric = [e for t, v in by_task.items() if t not in BOOLEAN_TASKS for e in v]
report = cell_report(model, processor, examples, max_new_tokens=24)
import pandas as pd; pd.set_option("display.width", 200)
print(report.round(3).to_string())
print("natural-wording mean accuracy (all cells equally):", round(report.groupby("task").accuracy.mean().mean(), 3),
      "per task:", report.groupby("task").accuracy.mean().round(3).to_dict())
print("true-rate range:", report.true_rate.min(), report.true_rate.max(), "format min:", report.format_rate.min())
d = group_diversity(model, processor, examples[::max(1, len(examples) // 48)], K=8, max_new_tokens=24)
print("diversity:", d)
if numeric:
    print(numeric_report(model, processor, numeric, max_new_tokens=24).round(3).to_string())
