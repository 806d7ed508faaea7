"""Issue 26: how much of the size task can the object list's category names answer without the image?
The rule: the object whose category has the larger mean volume (over the training split's objects) is the bigger one.
Session 18, 2026-11-26.   python research/size_prior.py
"""
from collections import defaultdict
import numpy as np
from consistency_amp.world.synthetic import SyntheticConfig, default_world
from consistency_amp.world.task_splits import build_task_splits
from consistency_amp.world.tasks import BOOLEAN_TASKS, task_values

train_world = default_world(SyntheticConfig(seed=0, n_images_per_split={"train": 1600, "val": 400, "test": 400}, sources=("SUNRGBD",)))
val_world = default_world(SyntheticConfig(seed=1, n_images_per_split={"train": 0, "val": 0, "test": 1200}, sources=("SUNRGBD",)))
train = build_task_splits(train_world, tasks=BOOLEAN_TASKS, sources=("SUNRGBD",))
val = build_task_splits(val_world, tasks=BOOLEAN_TASKS, sources=("SUNRGBD",))
for task in ("size", "depth"):
    means = defaultdict(list)
    for e in train[(task, "SUNRGBD")].train:
        for i, v in zip(e.question.idx_ids, task_values(e.scene, e.question)): means[e.scene.object(i).category].append(v)
    prior = {c: np.mean(v) for c, v in means.items()}
    hits = []
    for e in val[(task, "SUNRGBD")].test:
        a, b = (prior.get(e.scene.object(i).category) for i in e.question.idx_ids)
        if a is None or b is None or a == b: continue
        v0, v1 = task_values(e.scene, e.question)
        hits.append((a > b) == (v0 > v1))
    print(task, "category-prior rule right on", round(float(np.mean(hits)), 3), "of", len(hits), "val questions")
