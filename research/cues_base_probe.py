"""Issue 26, first recipe of a second base: the large base's recipe with the `cues` think (each compared object's
visible cue as a decile digit: "depth 3 vs 5"), so that a task's claim is a quantity named by its own cue word rather
than one shared "which object" digit (probes 1-4, research/README.md). Session 17, 2026-11-25.

    OMP_NUM_THREADS=1 python research/cues_base_probe.py build      # ~25 min on one core: scratch/bases/cues
    OMP_NUM_THREADS=1 python research/cues_base_probe.py band       # issue 8's band report on the pretraining world's held-out 20%
    OMP_NUM_THREADS=1 python research/cues_base_probe.py val [steps] [task]   # the base, then task trained alone (accuracy), on the val world
"""
import json, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import torch

torch.set_num_threads(1)
FOLDER = Path("scratch/bases/cues")
step = sys.argv[1]
if step == "build":
    from consistency_amp.training.pretraining import pretrain
    from consistency_amp.training.spatial_bases import SPATIAL_BASES
    t0 = time.time()
    print("wrote", pretrain(replace(SPATIAL_BASES["spatial-base-large"], think="cues"), FOLDER, progress=False),
          f"in {time.time() - t0:.0f} s", flush=True)
elif step == "band":
    subprocess.run([sys.executable, "research/eval_base.py", str(FOLDER), "300", "60"], check=True)
elif step == "val":
    from consistency_amp.evaluation.held_out import evaluate
    from consistency_amp.training.train import TrainParams, run_training
    from consistency_amp.world.synthetic import SyntheticConfig, default_world
    from consistency_amp.world.tasks import BOOLEAN_TASKS
    steps, task = (int(sys.argv[2]) if len(sys.argv) > 2 else 80), (sys.argv[3] if len(sys.argv) > 3 else "depth")
    train_world = default_world(SyntheticConfig(seed=0, n_images_per_split={"train": 1600, "val": 400, "test": 400}, sources=("SUNRGBD",)))
    val_world = default_world(SyntheticConfig(seed=1, n_images_per_split={"train": 0, "val": 0, "test": 1200}, sources=("SUNRGBD",)))
    adapters = {"base": None}
    if steps:
        name = f"cues_{task}_acc_s{steps}"
        run = run_training(TrainParams(model=str(FOLDER.resolve()), task=task, reward="accuracy", steps=steps, num_generations=8,
                                       pairs_per_device=2, learning_rate=2e-4, max_completion_length=24, run_name=name,
                                       data_root=str(train_world), runs_dir="scratch/sweep_runs", save_steps=0))
        adapters[name] = run / "adapter"
    for name, adapter in adapters.items():
        out = evaluate(str(FOLDER.resolve()), adapter=adapter, data_root=val_world, tasks=BOOLEAN_TASKS, sources=("SUNRGBD",),
                       max_examples=200, batch_size=64, max_new_tokens=24, progress=False)
        print(name, json.dumps({r["task"]: round(r["accuracy"], 3) for r in out["results"]}), flush=True)
