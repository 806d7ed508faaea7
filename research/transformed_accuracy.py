"""A model on x' = T(x): python research/transformed_accuracy.py [N_PER_TASK] [DRAWS] [RUN] [TASKS] [--val] [--marker-swap]
The base (or, given RUN, a run folder, the base with the run's adapter), on the first N held-out test questions per task
(TASKS: comma-separated, default the four boolean tasks) of the miniature experiment's world (--val: the sweep's val
world of sweep_val.py, which the val runs in scratch/sweep_runs are scored on; --marker-swap: every x' also swaps the
markers, as the marker-swap runs trained), DRAWS sampled transformations
each (the training sampler, `prompts.make_prompt_pair`): greedy accuracy on x and on x', and the greedy agreement rate
phi_T(answer(x)) == answer(x'), split by which image / question transformation T applied."""
import sys, json
from collections import defaultdict
import numpy as np, torch
from consistency_amp.science.experiment import ExperimentConfig, world_config, SOURCE
from consistency_amp.evaluation.decoders import GreedyDecoder
from consistency_amp.evaluation.held_out import held_out_examples
from consistency_amp.training.models import load_model
from consistency_amp.world.prompts import make_prompt_pair
from consistency_amp.world.synthetic import SyntheticConfig, default_world
from consistency_amp.world.tasks import BOOLEAN_TASKS
from consistency_amp.world.transforms import phi
from consistency_amp.reward.verifiers import parse_answer
torch.set_num_threads(1)
val, swap = "--val" in sys.argv, "--marker-swap" in sys.argv
given = [a for a in sys.argv[1:] if not a.startswith("--")]
args = given + ["50", "2", "", ",".join(BOOLEAN_TASKS)][len(given):]
n, draws, run, tasks = int(args[0]), int(args[1]), args[2], tuple(args[3].split(","))
adapter = f"{run}/adapter" if run else None
model, processor = load_model("spatial-base-large", lora=False, adapter=adapter)
model.eval(); decoder = GreedyDecoder(model, processor, 24)
world = (default_world(SyntheticConfig(seed=1, n_images_per_split={"train": 0, "val": 0, "test": 1200}, sources=(SOURCE,)))
         if val else default_world(world_config(ExperimentConfig())))
examples = held_out_examples(world, tasks, (SOURCE,), n)
rows = []
for (task, _), group in examples.items():
    for i, e in enumerate(group):
        for d in range(draws):
            pair = make_prompt_pair(e, np.random.default_rng([7, d, i]), marker_swap=swap)
            texts = decoder.complete([dict(prompt=p.messages, image=p.image) for p in (pair.original, pair.augmented)])
            a, b = (parse_answer(t, "boolean") for t in texts)
            T = pair.transform
            kinds = [k for k, on in (("flip", T.flip), ("crop", T.crop is not None), ("jitter", T.jitter is not None),
                                     ("relation_swap", T.relation_swap), ("order_swap", T.order_swap),
                                     ("marker_swap", T.marker_swap)) if on]
            rows.append(dict(task=task, kinds=kinds, x=a == pair.ground_truth, x_prime=b == pair.ground_truth_augmented,
                             claim=a, truth=pair.ground_truth, agree=a is not None and b is not None and phi(pair.relation, a) == b))
by = defaultdict(list)
for r in rows:
    by[(r["task"], "all")].append(r)
    for k in r["kinds"]: by[(r["task"], k)].append(r)
print(f"{'task':18} {'T contains':14} {'n':>4} {'acc x':>6} {'acc xp':>6} {'agree':>6}")
for (task, kind), rs in sorted(by.items()):
    print(f"{task:18} {kind:14} {len(rs):4d} {np.mean([r['x'] for r in rs]):6.3f} {np.mean([r['x_prime'] for r in rs]):6.3f} {np.mean([r['agree'] for r in rs]):6.3f}")
print(f"run: {run or 'base'}, world: {'val' if val else 'test'}, {n} questions per task, {draws} draws, marker swap: {swap}")
