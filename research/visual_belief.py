"""Does a trained run still look at the image? python research/visual_belief.py RUNS_FOLDER

For each run's stored test evaluation (eval/test.json), every boolean answer is mapped back to the claim it makes about
the canonical wording (relation phrase 0, object order as listed): claim = answer XOR relation XOR order-swapped.
A model that reads the image makes image-dependent claims; one that has settled on a fixed visual judgement ("object 1 is
always the closer") makes the same claim on every image, and its answers are then a function of the wording alone.
Printed per run and task: accuracy, the share of test images whose claim is the run's majority claim (claim
constancy), the same share for the ground truth (what an image-reading model would show), and the accuracy of the best
wording-only answer rule (one answer per (relation, order) cell, chosen on the test set itself: an upper bound), and
how far a category ranking explains the claims (category_rule: how well the other claims of the same (category,
category) pair predict a claim, leave-one-out; category_rule_fact: the same for the ground truth, the world's real category prior).
"""
import sys, json
from pathlib import Path
import numpy as np, pandas as pd
from consistency_amp.evaluation.held_out import held_out_examples

folder = Path(sys.argv[1])
rows = []
cache = {}
for test in sorted(folder.glob("*/eval/*.json")):   # the experiment's test.json, the val sweep's val.json
    d = json.loads(test.read_text())
    if "data_root" not in d: continue                # eval/test-sampled.json: sampled answers, not greedy ones
    root = Path(d["data_root"]) if Path(d["data_root"]).is_dir() else Path(".cache/synthetic") / Path(d["data_root"]).name
    if root not in cache:
        cache[root] = {e.uid: e for v in held_out_examples(root, d["tasks"], d["sources"]).values() for e in v}
    by_uid = cache[root]
    for r in d["examples"]:
        e = by_uid[r["uid"]]
        q = e.question
        if q.relation is None or r["answer"] is None: continue
        swapped = int(q.order != ((2, 3) if q.task == "relative_distance" else (1, 2)))
        wording = q.relation ^ swapped
        a, b = (e.scene.object(i).category for i in q.object_ids[-2:])   # the two compared objects, in listed order
        pair_flip = int(a > b)                                            # the claim about (first, second) in name order
        rows.append(dict(run=d["run"], task=q.task, relation=q.relation, swapped=swapped,
                         claim=int(r["answer"]) ^ wording, fact=int(r["ground_truth"]) ^ wording,
                         answer=int(r["answer"]), truth=int(r["ground_truth"]), pair=f"{min(a, b)}|{max(a, b)}",
                         pair_claim=int(r["answer"]) ^ wording ^ pair_flip, pair_fact=int(r["ground_truth"]) ^ wording ^ pair_flip))
df = pd.DataFrame(rows)

def _majority_share(g, column):
    "How well the other rows of the same category pair predict a row's `column` (leave-one-out majority; a tie scores 1/2)."
    ones, size = g.groupby("pair")[column].transform("sum") - g[column], g.groupby("pair")[column].transform("size") - 1
    vote = np.sign(2 * ones - size)                       # +1: the others say 1, -1: they say 0, 0: a tie or no others
    return float(np.where(vote == 0, 0.5, (vote > 0) == (g[column] == 1)).mean())

def summary(g):
    best_rule = g.groupby(["relation", "swapped"]).truth.agg(lambda t: max(t.mean(), 1 - t.mean())) \
                 .mul(g.groupby(["relation", "swapped"]).size()).sum() / len(g)
    return pd.Series(dict(n=len(g), accuracy=(g.answer == g.truth).mean(),
                          claim_constancy=max(g.claim.mean(), 1 - g.claim.mean()),
                          fact_constancy=max(g.fact.mean(), 1 - g.fact.mean()),
                          best_wording_rule=best_rule,
                          category_rule=_majority_share(g, "pair_claim"), category_rule_fact=_majority_share(g, "pair_fact")))
out = df.groupby(["run", "task"]).apply(summary).round(3)
pd.set_option("display.width", 200)
print(out.to_string())
print(out.groupby("run")[["accuracy", "claim_constancy", "fact_constancy", "category_rule", "category_rule_fact"]].mean().round(3).to_string())
