"""Can the pairing's vote beat the greedy answer?
python research/cross_view_vote.py [N_PER_TASK] [K] [TEMPERATURES] [MARKER_SWAP]

The minimal pairing's boolean reward is a vote (nbs/04_pairing.ipynb): of the 2K answers to x and x' = T(x), mapped
through phi_T, the combined majority is rewarded. Training can only move the model toward that majority, and the
experiment scores the *greedy* answer. So consistency training can raise held-out accuracy only where the cross-view
majority is right more often than the greedy answer already is. This probe measures both on the VAL world (seed 1,
never reported), for the base `spatial-base-large`, with the training sampler's pairs (MARKER_SWAP: the share of pairs
with the marker swap, 1 by default, 0 for the paper's set):

* greedy: the greedy answer to x;
* one sample: the mean accuracy of the K samples of x at temperature T;
* majority x: the majority of the K samples of x (a tie counts half);
* majority x+x': the majority of the 2K answers of x and x' (those of x' mapped through phi_T), the vote the pairing
  rewards.

TEMPERATURES is a comma list (default 1.0,0.7,0.5). One JSON line per temperature."""
import json
import sys

import numpy as np
import torch

from consistency_amp.evaluation.decoders import GreedyDecoder
from consistency_amp.evaluation.held_out import held_out_examples
from consistency_amp.science.experiment import SOURCE, ExperimentConfig, world_config
from consistency_amp.training.models import load_model
from consistency_amp.world.prompts import make_prompt_pair
from consistency_amp.world.synthetic import default_world
from consistency_amp.world.tasks import BOOLEAN_TASKS
from consistency_amp.world.transforms import phi
from consistency_amp.reward.verifiers import parse_answer

torch.set_num_threads(1)
args = sys.argv[1:] + [None] * 4
n, K = int(args[0] or 50), int(args[1] or 8)
temperatures = [float(t) for t in (args[2] or "1.0,0.7,0.5").split(",")]
swap = float(args[3]) if args[3] is not None else 1.0
model, processor = load_model("spatial-base-large", lora=False)
model.eval(); decoder = GreedyDecoder(model, processor, 24)
examples = held_out_examples(default_world(world_config(ExperimentConfig(), val=True)), BOOLEAN_TASKS, (SOURCE,), n)


def majority(votes, truth) -> float:
    votes = [v for v in votes if v is not None]
    if sum(votes) * 2 == len(votes): return 0.5               # a tie (or no parseable answer): a coin
    return float((sum(votes) * 2 > len(votes)) == truth)


def answers(batch, temperature):
    inputs = decoder.inputs(batch)
    with torch.inference_mode():
        out = model.generate(**inputs, do_sample=temperature > 0, temperature=temperature or None, top_k=0, top_p=1.0,
                             max_new_tokens=24, pad_token_id=decoder.pad_token_id)
    texts = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    return [parse_answer(t, "boolean") for t in texts]


pairs = {key: [(e, make_prompt_pair(e, np.random.default_rng([11, i]), marker_swap=swap)) for i, e in enumerate(group)]
         for key, group in examples.items()}
for temperature in temperatures:
    torch.manual_seed(0)
    per_task = {}
    for (task, _), group in pairs.items():
        rows = []
        for e, pair in group:
            x, xp = (dict(prompt=p.messages, image=p.image) for p in (pair.original, pair.augmented))
            greedy = answers([x], 0)[0]
            a, b = answers([x] * K, temperature), answers([xp] * K, temperature)
            mapped = [None if v is None else phi(pair.relation, v) for v in b]   # x' answers, as claims about x
            rows.append((greedy == e.answer, np.mean([v == e.answer for v in a]), majority(a, e.answer),
                         majority(a + mapped, e.answer)))
        per_task[task] = dict(zip(("greedy", "one_sample", "majority_x", "majority_x_xp"),
                                  (round(float(v), 3) for v in np.mean(rows, 0))), n=len(rows))
        print(temperature, task, per_task[task], file=sys.stderr, flush=True)
    mean = {k: round(float(np.mean([v[k] for v in per_task.values()])), 3)
            for k in ("greedy", "one_sample", "majority_x", "majority_x_xp")}
    print(json.dumps(dict(temperature=temperature, marker_swap=swap, K=K, n_per_task=n, mean=mean, per_task=per_task)), flush=True)
