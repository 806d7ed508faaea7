"""Issue 26: does the large base's recipe, given the numeric tasks too (`BaseRecipe.tasks`, the think states the number),
answer counting and absolute distance in format with a partial score, and what does it do to the boolean band?
Session 18, 2026-11-26.

    OMP_NUM_THREADS=1 python research/numeric_base_probe.py build   # ~30 min on one core: scratch/bases/numeric
    OMP_NUM_THREADS=1 python research/numeric_base_probe.py band    # research/eval_base.py: boolean cells, then numeric
    OMP_NUM_THREADS=1 python research/numeric_base_probe.py build 400   # the same with a full stage of 400 steps: scratch/bases/numeric_s400
    OMP_NUM_THREADS=1 python research/numeric_base_probe.py band 400
    (and 1000: scratch/bases/numeric_s1000)
"""
import subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import torch

torch.set_num_threads(1)
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 200   # the full stage's steps (the large recipe: 200)
FOLDER = Path("scratch/bases/numeric" + ("" if STEPS == 200 else f"_s{STEPS}"))
if sys.argv[1] == "build":
    from consistency_amp.training.pretraining import pretrain
    from consistency_amp.training.spatial_bases import SPATIAL_BASES
    from consistency_amp.world.tasks import TASKS
    t0 = time.time()
    print("wrote", pretrain(replace(SPATIAL_BASES["spatial-base-large"], tasks=TASKS, steps=STEPS), FOLDER, progress=False),
          f"in {time.time() - t0:.0f} s", flush=True)
elif sys.argv[1] == "band":
    subprocess.run([sys.executable, "research/eval_base.py", str(FOLDER), "300", "60"], check=True)
