"""Is the base's ability in its samples? python research/sampled_accuracy.py [N_PER_TASK] [K] [RUN]
On the first N held-out test questions per task of the miniature experiment's world (x only, no transformation):
greedy accuracy, the mean accuracy of K samples at T = 1 (what GRPO samples), and the accuracy of their majority.
RUN: a trained run folder (runs/experiment-*/<condition>-seed<s>); its adapter is loaded on the base (default: the base)."""
import sys, json
import numpy as np, torch
from consistency_amp.science.experiment import ExperimentConfig, world_config, SOURCE
from consistency_amp.evaluation.decoders import GreedyDecoder
from consistency_amp.evaluation.held_out import held_out_examples
from consistency_amp.training.models import load_model
from consistency_amp.world.prompts import load_rgb, make_prompt
from consistency_amp.world.synthetic import default_world
from consistency_amp.world.tasks import BOOLEAN_TASKS
from consistency_amp.reward.verifiers import parse_answer
torch.set_num_threads(1); torch.manual_seed(0)
n, K = (int(a) for a in (sys.argv[1:] + ["60", "8"])[:2])
run = sys.argv[3] if len(sys.argv) > 3 else None
model, processor = load_model("spatial-base-large", lora=False, adapter=None if run is None else f"{run}/adapter")
model.eval(); decoder = GreedyDecoder(model, processor, 24)
examples = held_out_examples(default_world(world_config(ExperimentConfig())), BOOLEAN_TASKS, (SOURCE,), n)
out = {}
for (task, _), group in examples.items():
    greedy, sampled, majority = [], [], []
    for e in group:
        p = make_prompt(e.scene, load_rgb(e.scene), e.question)
        one, many = (decoder.inputs([dict(prompt=p.messages, image=p.image)] * k) for k in (1, K))
        with torch.inference_mode():
            g = model.generate(**one, do_sample=False, max_new_tokens=24, pad_token_id=decoder.pad_token_id)
            s = model.generate(**many, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=24,
                               pad_token_id=decoder.pad_token_id)
        ga = parse_answer(processor.batch_decode(g[:, one["input_ids"].shape[1]:], skip_special_tokens=True)[0], "boolean")
        sa = [parse_answer(t, "boolean") for t in processor.batch_decode(s[:, many["input_ids"].shape[1]:], skip_special_tokens=True)]
        greedy.append(ga == e.answer); sampled.append(np.mean([a == e.answer for a in sa]))
        votes = [a for a in sa if a is not None]
        majority.append(0.5 if sum(votes) * 2 == len(votes) else float((sum(votes) * 2 > len(votes)) == e.answer))   # a tie: half
    out[task] = dict(n=len(group), greedy=round(float(np.mean(greedy)), 3), sampled=round(float(np.mean(sampled)), 3),
                     majority_of_K=round(float(np.mean(majority)), 3))
    print(task, out[task], flush=True)
print(json.dumps(dict(run=run, K=K, per_task=out, mean={k: round(float(np.mean([v[k] for v in out.values()])), 3)
                                               for k in ("greedy", "sampled", "majority_of_K")})))
