"""Which simple 2D rule do a val run's depth and size claims follow? python research/size_rule.py RUN...

For the runs of `sweep_val.py` (scratch/sweep_runs/<run>/eval/val.json): per task, how often the claim "the first-listed
object wins" (canonical relation) agrees with the first object's 2D box being lower in the image, with it being larger in
2D area, and with the fact; the same agreements for the ground truth beside them."""
import json, sys
from pathlib import Path
from consistency_amp.evaluation.held_out import held_out_examples
for run in sys.argv[1:]:
    d = json.loads((Path("scratch/sweep_runs") / run / "eval" / "val.json").read_text())
    root = Path(d["data_root"])
    ex = {e.uid: e for v in held_out_examples(root, d["tasks"], d["sources"]).values() for e in v}
    out = {}
    for r in d["examples"]:
        e = ex[r["uid"]]; q = e.question
        if r["answer"] is None or q.task not in ("size", "depth"): continue
        first, second = (e.scene.object(i) for i in q.object_ids[-2:])   # as listed: "object 1", "object 2" after the order
        # the claim "the first-listed object wins" under the canonical relation (bigger / closer)
        swapped = int(q.order != (1, 2)); wording = q.relation ^ swapped
        claim_first_wins = int(r["answer"]) ^ wording
        fact_first_wins = int(r["ground_truth"]) ^ wording
        box = lambda o: o.bbox2D_proj if o.bbox2D_tight is None else o.bbox2D_tight
        lower = int((box(first)[1] + box(first)[3]) > (box(second)[1] + box(second)[3]))   # first's box centre lower in the image
        larger2d = int((box(first)[2] - box(first)[0]) * (box(first)[3] - box(first)[1]) > (box(second)[2] - box(second)[0]) * (box(second)[3] - box(second)[1]))
        s = out.setdefault(q.task, dict(n=0, claim_lower=0, fact_lower=0, claim_larger2d=0, fact_larger2d=0, claim_fact=0))
        s["n"] += 1; s["claim_lower"] += claim_first_wins == lower; s["fact_lower"] += fact_first_wins == lower
        s["claim_larger2d"] += claim_first_wins == larger2d; s["fact_larger2d"] += fact_first_wins == larger2d
        s["claim_fact"] += claim_first_wins == fact_first_wins
    for t, s in out.items():
        print(run, t, {k: (round(v / s["n"], 3) if k != "n" else v) for k, v in s.items()})
