"""Issue 26, session 20: a calibration stage after a base is built. Bases that learn their tasks sample one answer
(entropy 0.005, 93% of RL groups without reward variance: research/README.md, session 19), and writing a share of the
targets for the swapped question from the start (`BaseRecipe.fact_noise` through the whole build) stops depth from
being learned at all. So: take a built base, freeze its vision tower, and train the language model a few steps more
on its own pretraining targets with `fact_noise` of them stating the other object, at a low learning rate, so that
where it is sure it samples the other claim about that often, keeping what it has learned to see.

    OMP_NUM_THREADS=1 python research/calibrate_base.py SRC NAME NOISE STEPS LR   # scratch/bases/SRC -> scratch/bases/NAME
    OMP_NUM_THREADS=1 python research/calibrate_base.py second_i100 i100_cal20 0.2 100 3e-4

The stage is the product's (`training.pretraining.calibration_stage`, `BaseRecipe.calibration_steps`, since this
session); `i100_cal20` and `i100_cal35` were made by this script's first version, the same loop written inline
(its log's key was "loss", the product's is "calibration_loss"), 192 s each on one core.
"""
import json, sys, time
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
from consistency_amp.training.pretraining import (EDGES_FILE, LOG_FILE, RECIPE_FILE, BaseRecipe, base_processor,
                                                  calibration_stage, image_variants, pretraining_examples)

src, name, noise, steps, lr = Path("scratch/bases") / sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
out = Path("scratch/bases") / name
if out.exists(): raise SystemExit(f"{out} exists")
saved = json.loads((src / RECIPE_FILE).read_text())
recipe = BaseRecipe(**{f.name: saved[f.name] for f in fields(BaseRecipe) if f.name in saved})
edges = json.loads((src / EDGES_FILE).read_text())
processor = base_processor(recipe, AutoProcessor.from_pretrained(src).tokenizer)   # the build's own processor class
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32).train()
train, _ = pretraining_examples(recipe)
rng = np.random.default_rng(recipe.seed + 1)
items = [v for e in train for v in image_variants(e, processor, rng)]
log, t0 = [], time.time()
calibration_stage(model, items, processor, replace(recipe, calibration_steps=steps, calibration_lr=lr, fact_noise=noise),
                  edges, rng, log, progress=False)
out.mkdir(parents=True)
model.eval().save_pretrained(out); processor.save_pretrained(out)
(out / RECIPE_FILE).write_text(json.dumps(saved | dict(calibrated_from=src.name, calibration=dict(
    fact_noise=noise, steps=steps, lr=lr, trained="language model (vision tower frozen)")), indent=1))
(out / EDGES_FILE).write_text(json.dumps(edges))
(out / LOG_FILE).write_text((src / LOG_FILE).read_text() + "".join(json.dumps(r) + "\n" for r in log))
print("wrote", out, f"in {time.time() - t0:.0f} s", flush=True)
