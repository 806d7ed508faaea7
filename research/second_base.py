"""Issue 26: candidate second bases from the product recipe: the large recipe with the numeric tasks
(`BaseRecipe.tasks`), per-task object digits (`object_digits="per_task"`) and the longer logic and full stages the
per-task digits need (1500 and 400 steps; `task_tokens_probe.py`), session 18, 2026-11-26; and variants of it, each
a JSON of `BaseRecipe` overrides on top of that candidate (session 19).

    OMP_NUM_THREADS=1 python research/second_base.py build   # ~35 min on one core: scratch/bases/second
    OMP_NUM_THREADS=1 python research/second_base.py band    # research/eval_base.py: boolean cells, then numeric
    OMP_NUM_THREADS=1 python research/second_base.py build NAME '{"perception_steps": 500}'   # scratch/bases/NAME
    OMP_NUM_THREADS=1 python research/second_base.py band NAME
"""
import json, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import torch

torch.set_num_threads(1)
FOLDER = Path("scratch/bases") / (sys.argv[2] if len(sys.argv) > 2 else "second")
if sys.argv[1] == "build":
    from consistency_amp.training.pretraining import pretrain
    from consistency_amp.training.spatial_bases import SPATIAL_BASES
    from consistency_amp.world.tasks import TASKS
    recipe = replace(SPATIAL_BASES["spatial-base-large"], tasks=TASKS, object_digits="per_task", logic_steps=1500, steps=400)
    recipe = replace(recipe, **(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}))
    t0 = time.time()
    print("wrote", pretrain(recipe, FOLDER, progress=False), f"in {time.time() - t0:.0f} s", flush=True)
elif sys.argv[1] == "band":
    subprocess.run([sys.executable, "research/eval_base.py", str(FOLDER), "300", "60"], check=True)
