"""Issue 26: one task trained alone from a saved base (a folder), then greedy on the val world's boolean tasks.
Session 18, 2026-11-26. The experiment's settings (80 steps, K 8, 2 pairs, lr 2e-4, LoRA r 32, the accuracy reward unless
overridden), trained on the experiment world (seed 0, SUN RGB-D), evaluated on the val world (seed 1), 200 per task.

    OMP_NUM_THREADS=1 python research/base_val_arm.py FOLDER NAME '{TrainParams overrides}'   # "steps": 0 evaluates the base
    OMP_NUM_THREADS=1 python research/base_val_arm.py FOLDER NAME '{"task": "absolute_distance"}' counting,absolute_distance
                                                                      # the last argument: the evaluated tasks (default: the boolean ones)

Prints accuracy per task, the format rate and, per task, the share of thinks whose first claim names the second listed
object (0.5 follows the images; probes 1-2 in research/README.md). Writes scratch/sweep_runs/NAME/eval/val.json.
"""
import json, re, sys, time
from pathlib import Path

import torch

torch.set_num_threads(1)
from consistency_amp.evaluation.held_out import evaluate
from consistency_amp.training.runs import jsonable, write_json
from consistency_amp.training.train import TrainParams, run_training
from consistency_amp.world.synthetic import SyntheticConfig, default_world
from consistency_amp.world.tasks import BOOLEAN_TASKS

folder, name, over = Path(sys.argv[1]).resolve(), sys.argv[2], json.loads(sys.argv[3])
eval_tasks = tuple(sys.argv[4].split(",")) if len(sys.argv) > 4 else BOOLEAN_TASKS
train_world = default_world(SyntheticConfig(seed=0, n_images_per_split={"train": 1600, "val": 400, "test": 400}, sources=("SUNRGBD",)))
val_world = default_world(SyntheticConfig(seed=1, n_images_per_split={"train": 0, "val": 0, "test": 1200}, sources=("SUNRGBD",)))
t0, adapter = time.time(), None
if over.get("steps", 1) > 0:
    run = run_training(TrainParams(**dict(model=str(folder), task="depth", reward="accuracy", steps=80, num_generations=8,
                                          pairs_per_device=2, learning_rate=2e-4, max_completion_length=24, run_name=name,
                                          data_root=str(train_world), runs_dir="scratch/sweep_runs", save_steps=0) | over))
    adapter = run / "adapter"
t1 = time.time()
out, recs = evaluate(str(folder), adapter=adapter, data_root=val_world, tasks=eval_tasks, sources=("SUNRGBD",),
                     max_examples=200, batch_size=64, max_new_tokens=24, progress=False, return_records=True)
write_json(Path("scratch/sweep_runs") / name / "eval" / "val.json", jsonable(out | dict(run=name, data_root=str(val_world), examples=recs)))
from consistency_amp.training.think_targets import object_digit   # the base's own naming of the second listed object
naming = json.loads((folder / "recipe.json").read_text()).get("object_digits", "shared") if (folder / "recipe.json").is_file() else "shared"
naming = "per_task" if (folder / "NOTE.txt").is_file() else naming   # task_tokens_probe.py's bases say 'match' in recipe.json
claims = {}
for r in recs:
    if r["task"] in BOOLEAN_TASKS and (m := re.search(r"<think>\s*\w+ (\d)", r.get("completion") or "")):
        second = object_digit(r["task"], 3 if r["task"] == "relative_distance" else 2, naming)
        claims.setdefault(r["task"], []).append(m.group(1) == second)
print(json.dumps(dict(name=name, base=folder.name, over=over, train_s=round(t1 - t0), eval_s=round(time.time() - t1),
                      per_task={r["task"]: round(r["accuracy"], 3) for r in out["results"]},
                      format=[round(r["format_rate"], 3) for r in out["results"]],
                      second_object_first_claim={t: round(sum(v) / len(v), 3) for t, v in claims.items()})), flush=True)
