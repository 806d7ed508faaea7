"""Issue 26 probe 3: which object does each run's think claim first, per task? (session 17, 2026-11-25)

The spatial bases write `<think> bigger 2; 1 smaller; bigger 2True</think><answer>True</answer>`: the first
"<word> <digit>" is the visual claim (which listed object is bigger, closer, further left), then the question restated,
then the answer (claim == the object the question names). Reads stored evaluations only, and counts the first claim's
digit per (run, task): a model that reads the image names object 1 or 2 as the images say; a fixed readout names one.

    python research/transfer_think.py runs/experiment-31a1bfd5
"""
import collections, json, re, sys
from pathlib import Path

runs = Path(sys.argv[1])
print(f"{'run':38s} {'task':18s} first claim (share naming object 2)")
for folder in sorted(p.parent.parent for p in runs.glob("*/eval/test.json")):
    params = json.loads((folder / "params.json").read_text()) if (folder / "params.json").is_file() else {}
    if folder.name != "base" and params.get("task") not in ("depth", "size", "orientation", "relative_distance"): continue
    recs = [x for x in json.loads((folder / "eval" / "test.json").read_text())["examples"] if x["source"] == "SUNRGBD"]
    for task in ("orientation", "depth", "size"):
        digits = [m.group(1) for x in recs if x["task"] == task and (m := re.match(r"<think> \w+ (\d)", x["completion"]))]
        count = collections.Counter(digits)
        print(f"{folder.name:38s} {task:18s} {count['2'] / max(len(digits), 1):.2f} of {len(digits)}")
