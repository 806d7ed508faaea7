"""Issue 26, second recipe of a second base: the large base's recipe with the match think, but each task names its
objects with digits of its own (orientation 1 / 2, depth 3 / 4, size 5 / 6, relative distance 7 / 8 for objects 2 / 3),
so that the claim slot the probes found shared ("bigger 2", "closer 2": research/README.md, probes 1-4) is a
different output token per task. Session 18, 2026-11-26.

    OMP_NUM_THREADS=1 python research/task_tokens_probe.py build      # ~22 min on one core: scratch/bases/task_tokens
    OMP_NUM_THREADS=1 python research/task_tokens_probe.py build 1500 400   # logic and full stages longer: .../task_tokens_l1500_s400
    OMP_NUM_THREADS=1 python research/task_tokens_probe.py build 1500 400 shared   # the control: shared digits, same stages
    OMP_NUM_THREADS=1 python research/task_tokens_probe.py band       # issue 8's band report on the pretraining world's held-out 20%
    OMP_NUM_THREADS=1 python research/task_tokens_probe.py val NAME '{TrainParams overrides}'   # train (steps 0: the base), eval on val

The think becomes ' closer 4; 1 further; closer 4True' (depth, object 2 seen closer, 'Is object 1 further ...').
The question's own order digit ('1 further') stays the prompt's: it is a copy, not a claim.
"""
import json, sys, time
from pathlib import Path

import torch

torch.set_num_threads(1)
LOGIC, FULL = (int(sys.argv[2]), int(sys.argv[3])) if sys.argv[1] == "build" and len(sys.argv) > 3 else (600, 200)
SHARED = sys.argv[-1] == "shared"   # the control: the shipped match think (every task names its objects 1 / 2 / 3)
FOLDER = Path(f"scratch/bases/{'shared' if SHARED else 'task_tokens'}" + ("" if (LOGIC, FULL) == (600, 200) else f"_l{LOGIC}_s{FULL}"))
OBJECT_TOKENS = {"orientation": {1: "1", 2: "2"}, "depth": {1: "3", 2: "4"}, "size": {1: "5", 2: "6"},
                 "relative_distance": {2: "7", 3: "8"}}


def task_match_text(scene, question):
    "`match_text` with the task's own object digits in the two claim slots (who is seen to win, whom the question claims)."
    from consistency_amp.training.think_targets import FACT_WORDS, fact_text
    from consistency_amp.world.tasks import RELATION_PHRASES
    word, winner = FACT_WORDS[question.task], int(fact_text(scene, question).split()[1])
    relation = RELATION_PHRASES[question.task][question.relation].split()[0]
    claimed = question.order[0] if question.relation == 0 else question.order[1]
    names = OBJECT_TOKENS[question.task]
    return f" {word} {names[winner]}; {question.order[0]} {relation}; {word} {names[claimed]}{claimed == winner}"


def first_claims(records) -> dict:
    "Per task, the share of thinks whose first claim names the task's second listed object (0.5 follows the images)."
    import re
    out = {}
    for r in records:
        task, text = r["task"], r.get("completion") or r.get("text") or ""
        m = re.search(r"<think>\s*\w+ (\d)", text)
        if not m: continue
        second = OBJECT_TOKENS[task][3 if task == "relative_distance" else 2]
        out.setdefault(task, []).append(m.group(1) == second)
    return {t: round(sum(v) / len(v), 3) for t, v in out.items()}


step = sys.argv[1]
if step == "build":
    import consistency_amp.training.pretraining as pretraining
    import consistency_amp.training.think_targets as think_targets
    from consistency_amp.training.spatial_bases import SPATIAL_BASES
    if not SHARED: think_targets.match_text = task_match_text   # target_completion looks it up at call time
    t0 = time.time()
    from dataclasses import replace
    recipe = replace(SPATIAL_BASES["spatial-base-large"], logic_steps=LOGIC, steps=FULL)
    print("wrote", pretraining.pretrain(recipe, FOLDER, progress=False),
          f"in {time.time() - t0:.0f} s", flush=True)
    if not SHARED: (FOLDER / "NOTE.txt").write_text("recipe.json says think 'match'; the targets used research/task_tokens_probe.py's "
                                     f"per-task object digits {OBJECT_TOKENS}\n")
elif step == "band":
    import subprocess
    subprocess.run([sys.executable, "research/eval_base.py", str(FOLDER), "300", "60"], check=True)
elif step == "val":
    from consistency_amp.evaluation.held_out import evaluate
    from consistency_amp.training.runs import jsonable, write_json
    from consistency_amp.training.train import TrainParams, run_training
    from consistency_amp.world.synthetic import SyntheticConfig, default_world
    from consistency_amp.world.tasks import BOOLEAN_TASKS
    name, over = sys.argv[2], json.loads(sys.argv[3])
    train_world = default_world(SyntheticConfig(seed=0, n_images_per_split={"train": 1600, "val": 400, "test": 400}, sources=("SUNRGBD",)))
    val_world = default_world(SyntheticConfig(seed=1, n_images_per_split={"train": 0, "val": 0, "test": 1200}, sources=("SUNRGBD",)))
    t0, adapter = time.time(), None
    if over.get("steps", 1) > 0:
        run = run_training(TrainParams(**dict(model=str(FOLDER.resolve()), task="depth", reward="accuracy", steps=80,
                                              num_generations=8, pairs_per_device=2, learning_rate=2e-4,
                                              max_completion_length=24, run_name=name, data_root=str(train_world),
                                              runs_dir="scratch/sweep_runs", save_steps=0) | over))
        adapter = run / "adapter"
    t1 = time.time()
    out, recs = evaluate(str(FOLDER.resolve()), adapter=adapter, data_root=val_world, tasks=BOOLEAN_TASKS,
                         sources=("SUNRGBD",), max_examples=200, batch_size=64, max_new_tokens=24, progress=False,
                         return_records=True)
    write_json(Path("scratch/sweep_runs") / name / "eval" / "val.json",
               jsonable(out | dict(run=name, data_root=str(val_world), examples=recs)))
    print(json.dumps(dict(name=name, over=over, train_s=round(t1 - t0), eval_s=round(time.time() - t1),
                          per_task={r["task"]: round(r["accuracy"], 3) for r in out["results"]},
                          format=[round(r["format_rate"], 3) for r in out["results"]],
                          second_object_first_claim=first_claims(recs))), flush=True)
