"""Val sweep: python scratch/sweep_val.py NAME '{TrainParams overrides}' [N_PER_TASK]
Trains on the experiment world's train split (seed 0, SUNRGBD, 2400 images), evaluates greedy on the VAL world's test
split (seed 1, never used for reported numbers), N per task."""
import sys, json, time, os
import torch
torch.set_num_threads(1)
from consistency_amp.world.synthetic import default_world, SyntheticConfig
from consistency_amp.training.train import TrainParams, run_training
from consistency_amp.evaluation.held_out import evaluate
from consistency_amp.world.tasks import BOOLEAN_TASKS
name, over = sys.argv[1], json.loads(sys.argv[2]); n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
train_world = default_world(SyntheticConfig(seed=0, n_images_per_split={'train':1600,'val':400,'test':400}, sources=('SUNRGBD',)))
val_world = default_world(SyntheticConfig(seed=1, n_images_per_split={'train':0,'val':0,'test':1200}, sources=('SUNRGBD',)))
t0 = time.time(); adapter = None
if over.get("steps", 1) > 0:
    run = run_training(TrainParams(**dict(model="spatial-base-large", task="joint", run_name=name, data_root=str(train_world),
                                          runs_dir="scratch/sweep_runs", save_steps=0, max_completion_length=24) | over))
    adapter = run / "adapter"
t1 = time.time()
out, recs = evaluate("spatial-base-large", adapter=adapter, data_root=val_world, tasks=BOOLEAN_TASKS, sources=("SUNRGBD",),
               max_examples=n, batch_size=64, max_new_tokens=24, progress=False, return_records=True)
per = {r["task"]: round(r["accuracy"], 3) for r in out["results"]}
from consistency_amp.training.runs import jsonable, write_json
write_json(__import__("pathlib").Path("scratch/sweep_runs") / name / "eval" / "val.json",
           jsonable(out | dict(run=name, data_root=str(val_world), examples=recs)))
tr = {}
for r in recs:
    if r.get("answer") in (True, False): tr.setdefault(r["task"], []).append(float(r["answer"]))
print(json.dumps(dict(name=name, over=over, train_s=round(t1 - t0), eval_s=round(time.time() - t1),
                      mean=round(sum(per.values()) / len(per), 4), per_task=per,
                      true_rate={k: round(sum(v) / len(v), 3) for k, v in tr.items()},
                      format=[round(r["format_rate"], 3) for r in out["results"]])), flush=True)
