"""Issue 26, session 20: the same-task and cross-task gains of one base's val arms (`base_val_arm.py`), per trained task
and reward, with a 95% bootstrap interval over seeds and val examples (paired with the base on the same examples).

    python research/transfer_arms.py cal35            # reads scratch/sweep_runs/cal35_{val,depth_acc[_s1,_s2],...}/eval/val.json

Arms are named PREFIX_<task>_<acc|cons>[_s<seed>] (seed 0 without a suffix); the base's evaluation is PREFIX_val.
"""
import json, re, sys
from pathlib import Path

import numpy as np

prefix, runs = sys.argv[1], Path("scratch/sweep_runs")
def correct(name):
    recs = json.loads((runs / name / "eval" / "val.json").read_text())["examples"]
    return {r["uid"]: (r["task"], float(r["accuracy"])) for r in recs}

base = correct(f"{prefix}_val")
arms = {}
for folder in sorted(runs.glob(f"{prefix}_*")):
    if (folder / "eval" / "val.json").is_file() and (m := re.fullmatch(rf"{prefix}_(depth|size)_(acc|cons)(?:_s(\d))?", folder.name)):
        arms.setdefault((m.group(1), m.group(2)), []).append(correct(folder.name))
rng = np.random.default_rng(0)
print(f"base {prefix}_val: " + ", ".join(f"{t} {np.mean([a for task, a in base.values() if task == t]) * 100:.1f}"
                                         for t in ("depth", "size", "orientation", "relative_distance")))
print("trained  reward  evaluated  seeds  gain (pp)  95% interval  per seed")
for (trained, reward), seeds in sorted(arms.items()):
    for task in ("depth", "size"):
        uids = [u for u, (t, _) in base.items() if t == task]
        gains = np.array([[s[u][1] - base[u][1] for u in uids] for s in seeds])   # seeds x examples
        boot = [gains[rng.integers(len(seeds), size=len(seeds))][:, rng.integers(len(uids), size=len(uids))].mean()
                for _ in range(2000)]
        low, high = np.percentile(boot, [2.5, 97.5]) * 100
        print(f"{trained:8s} {reward:6s}  {task:9s}  {len(seeds):5d}  {gains.mean() * 100:+8.1f}  [{low:+.1f}, {high:+.1f}]"
              f"  {[round(float(g) * 100, 1) for g in gains.mean(1)]}")
