"""Issue 26 probe 2: after depth training, is size still in the features, or only lost at the readout? (session 17)

For the base and LoRA adapters of stored per-task runs, on the val world (never the test world): the last-layer (and
every layer's) hidden state at the last prompt token of canonical questions (relation phrase 0, objects in listed
order, "Is object 1 bigger than object 2?"), one per val pair, then a linear probe of each task's answer from those
features (ridge regression on +-1, 5-fold cross-validated accuracy). If the depth-trained model's size features still
give the size answer while its greedy size answers are a fixed claim (probe 1, `transfer_claims.py`), the readout
broke, not the features.

    python research/transfer_features.py [run folder ...]      # default: the base and runs/experiment-*/{depth,size}_*-seed0
"""
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from consistency_amp.evaluation.decoders import GreedyDecoder
from consistency_amp.evaluation.held_out import held_out_examples
from consistency_amp.science.experiment_design import ExperimentConfig, world_config
from consistency_amp.training.models import load_model
from consistency_amp.world.prompts import load_rgb, make_prompt
from consistency_amp.world.synthetic import default_world
from consistency_amp.world.tasks import ground_truth

TASKS = ("depth", "size")
val_root = default_world(world_config(ExperimentConfig(), val=True))
examples = held_out_examples(val_root, tasks=TASKS, sources=("SUNRGBD",))
canonical = {t: [(e.scene, q, ground_truth(e.scene, q)) for e in examples[t, "SUNRGBD"]
                 for q in [replace(e.question, relation=0, order=(1, 2))]] for t in TASKS}


def features(adapter=None, batch=16) -> dict[str, np.ndarray]:
    "{task: (n, layers, hidden)} hidden states at the last prompt token."
    model, processor = load_model("spatial-base-large", lora=False, adapter=adapter)
    model.eval(); decoder = GreedyDecoder(model, processor)
    out = {}
    for task, items in canonical.items():
        rows = [dict(prompt=make_prompt(s, load_rgb(s), q).messages, image=load_rgb(s)) for s, q, _ in items]
        feats = []
        for i in range(0, len(rows), batch):
            with torch.inference_mode():
                hs = model(**decoder.inputs(rows[i:i + batch]), output_hidden_states=True).hidden_states
            feats.append(torch.stack([h[:, -1, :] for h in hs], 1).float().numpy())
        out[task] = np.concatenate(feats)
    return out


def probe(x: np.ndarray, y: np.ndarray, folds: int = 5, ridge: float = 1.0, seed: int = 0) -> float:
    "Cross-validated accuracy of a ridge-regression classifier of y (bool) from x."
    idx = np.random.default_rng(seed).permutation(len(y)); correct = 0
    for k in range(folds):
        test = idx[k::folds]; train = np.setdiff1d(idx, test)
        mu, sd = x[train].mean(0), x[train].std(0) + 1e-6
        a = np.c_[(x[train] - mu) / sd, np.ones(len(train))]
        w = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ np.where(y[train], 1.0, -1.0))
        correct += ((np.c_[(x[test] - mu) / sd, np.ones(len(test))] @ w > 0) == y[test]).sum()
    return correct / len(y)


runs = [Path(a) for a in sys.argv[1:]] or [None] + sorted(Path("runs").glob("experiment-*/depth_*-seed0")) \
       + sorted(Path("runs").glob("experiment-*/size_*-seed0"))
print(f"val world {val_root}; canonical questions: " + ", ".join(f"{t} {len(v)} ({np.mean([a for *_, a in v]):.2f} true)" for t, v in canonical.items()))
for run in runs:
    feats = features(None if run is None else run / "adapter")
    for task in TASKS:
        y = np.array([a for *_, a in canonical[task]])
        per_layer = [probe(feats[task][:, l], y) for l in range(feats[task].shape[1])]
        print(f"{'base' if run is None else run.name:38s} {task:6s} probe accuracy by layer: " + " ".join(f"{p:.2f}" for p in per_layer))
