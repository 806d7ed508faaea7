"""The table of `sampled_accuracy.py` outputs: python research/sampled_table.py RESULTS.jsonl ...
One row per condition (runs folder name without its seed): greedy, sampled (T = 1) and majority-of-K accuracy, the mean
over its seeds with every seed's value, and the change against the base; then the same per task."""
import json, re, sys
from collections import defaultdict

rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
by = defaultdict(list)
for r in rows:
    name = "base" if r["run"] is None else re.sub(r"-seed\d+$", "", r["run"].rstrip("/").split("/")[-1])
    by[name].append(r)
base = by["base"][0]["mean"]
metrics = ("greedy", "sampled", "majority_of_K")
print("| condition | seeds | " + " | ".join(f"{m} (%) [per seed]" for m in metrics) + " | sampled - base (pp) |")
print("|---|---|" + "---|" * (len(metrics) + 1))
for name, rs in by.items():
    cells = []
    for m in metrics:
        v = [100 * r["mean"][m] for r in rs]
        cells.append(f"{sum(v) / len(v):.1f}" + (f" [{', '.join(f'{x:.1f}' for x in v)}]" if len(v) > 1 else ""))
    gain = sum(100 * (r["mean"]["sampled"] - base["sampled"]) for r in rs) / len(rs)
    print(f"| {name} | {len(rs)} | " + " | ".join(cells) + f" | {gain:+.1f} |")
tasks = list(by["base"][0]["per_task"])
print("\nSampled accuracy (%) per task, mean over seeds:\n")
print("| condition | " + " | ".join(tasks) + " |")
print("|---|" + "---|" * len(tasks))
for name, rs in by.items():
    print(f"| {name} | " + " | ".join(f"{100 * sum(r['per_task'][t]['sampled'] for r in rs) / len(rs):.1f}" for t in tasks) + " |")
