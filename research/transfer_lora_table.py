"""Issue 26 probe 4's table: per val run of `sweep_val.py`, accuracy per task and the share of each task's think claims
naming object 2 (`transfer_think.py`'s measure; 0.5 follows the images, near 1 is the fixed readout).

    python research/transfer_lora_table.py scratch/sweep_runs/depth_acc_r32 scratch/sweep_runs/depth_acc_r4 ...
"""
import json, re, sys
from pathlib import Path

print(f"{'run':24s} " + " ".join(f"{t:>18s}" for t in ("orientation", "depth", "size", "relative_distance")))
for folder in map(Path, sys.argv[1:]):
    recs = json.loads((folder / "eval" / "val.json").read_text())["examples"]
    cells = []
    for task in ("orientation", "depth", "size", "relative_distance"):
        rs = [r for r in recs if r["task"] == task]
        digits = [m.group(1) for r in rs if (m := re.match(r"<think> \w+ (\d)", r["completion"]))]
        acc = sum(r["accuracy"] for r in rs) / len(rs)
        cells.append(f"{acc:.2f} (obj2 {digits.count('2') / max(len(digits), 1):.2f})")
    print(f"{folder.name:24s} " + " ".join(f"{c:>18s}" for c in cells))
