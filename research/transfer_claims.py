"""Issue 26 probe 1: what do per-task runs answer on the tasks they were not trained on? (session 17, 2026-11-25)

Reads stored evaluations only (no training, no setting chosen): for the base and every per-task run in a runs folder,
per boolean task, the greedy accuracy, the claim constancy (the share of questions whose answer makes the run's majority
claim about the canonical wording, `science.table.claim_constancy`: 0.5 when the claims follow the images as the
ground truth's do, 1 for a fixed judgement read through the wording), and how often the run gives the base's answer.

    python research/transfer_claims.py runs/experiment-31a1bfd5 [data_root]

data_root defaults to the runs' own (params.json). Prints one row per (run, task).
"""
import json, sys
from pathlib import Path

import numpy as np

from consistency_amp.evaluation.held_out import held_out_examples
from consistency_amp.science.table import canonical_claim, claim_constancy
from consistency_amp.world.tasks import BOOLEAN_TASKS

runs = Path(sys.argv[1])
folders = sorted(p.parent.parent for p in runs.glob("*/eval/test.json"))
per_task = [f for f in folders if f.name == "base" or json.loads((f / "params.json").read_text()).get("task") in BOOLEAN_TASKS]
data_root = sys.argv[2] if len(sys.argv) > 2 else json.loads((per_task[-1] / "params.json").read_text())["data_root"]
examples = held_out_examples(data_root, tasks=BOOLEAN_TASKS, sources=("SUNRGBD",))
questions = {e.uid: e.question for split in examples.values() for e in split}
truth_claims = {u: canonical_claim(e.answer, e.question) for split in examples.values() for e in split for u in [e.uid]}

def answers(folder):
    return {x["uid"]: x for x in json.loads((folder / "eval" / "test.json").read_text())["examples"] if x["source"] == "SUNRGBD"}

base = answers(runs / "base")
print(f"{'run':38s} {'trained':8s} {'task':18s} {'acc':>5s} {'constancy':>9s} {'truth':>6s} {'as base':>7s}")
for folder in per_task:
    trained = "-" if folder.name == "base" else json.loads((folder / "params.json").read_text())["task"]
    recs = answers(folder)
    for task in BOOLEAN_TASKS:
        uids = [u for u, x in recs.items() if x["task"] == task and isinstance(x["answer"], bool)]
        claims = [canonical_claim(recs[u]["answer"], questions[u]) for u in uids]
        print(f"{folder.name:38s} {trained:8s} {task:18s} {np.mean([recs[u]['accuracy'] for u in uids]):5.2f} "
              f"{claim_constancy(claims):9.2f} {claim_constancy([truth_claims[u] for u in uids]):6.2f} "
              f"{np.mean([recs[u]['answer'] == base[u]['answer'] for u in uids]):7.2f}")
