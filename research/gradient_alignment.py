"""Where does the consistency reward's gradient point at step 0?
python research/gradient_alignment.py [PAIRS] [paper|ms] [SEED]

On one batch of PAIRS prompt pairs (x, x' = T(x)) of the experiment's training world, `spatial-base-large` with a fresh
LoRA adapter samples K = 8 completions for x and for x' at T = 1. The same completions are then scored three ways and
turned into GRPO advantages (reward minus the group mean, over the group's std):
- accuracy: 1 for the right answer (labels);
- consistency: the paper's minimal-pairing consistency reward (no labels);
- fixed judgement: 1 when the completion's claim about the canonical wording (science.canonical_claim) is the batch's
  most common claim for its task, the direction toward "one visual judgement, read through the wording".
Each gives a policy gradient g = sum_i A_i grad log pi(y_i) over the LoRA parameters. Printed: the three cosines, and
the consistency gradient fitted on the other two (g_cons ~ a g_acc + b g_fixed, least squares) with the share of its
squared norm they explain. `ms` draws T with the marker swap (transforms.BEYOND_PAPER_TRANSFORMS).
"""
import sys, time
import numpy as np, torch
from consistency_amp.science.experiment import ExperimentConfig, world_config
from consistency_amp.training.models import load_model
from consistency_amp.reward.pairing import consistency_rewards
from consistency_amp.world.prompts import make_prompt_pair
from consistency_amp.science.table import canonical_claim
from consistency_amp.world.synthetic import default_world
from consistency_amp.training.train import TrainParams, train_examples
from consistency_amp.reward.verifiers import parse_answer

torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "1")))
n_pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 16
marker_swap = (sys.argv[2] if len(sys.argv) > 2 else "paper") == "ms"
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
K, MAX_NEW = 8, 24
torch.manual_seed(seed)
start = time.time()
model, processor = load_model("spatial-base-large", lora=True)
model.train()
params = [p for p in model.parameters() if p.requires_grad]
root = default_world(world_config(ExperimentConfig()))
examples = train_examples(TrainParams(task="joint", data_root=str(root)))
rng = np.random.default_rng(seed)
pairs = [make_prompt_pair(examples[i], rng, marker_swap=marker_swap) for i in rng.choice(len(examples), n_pairs, replace=False)]
tok = processor.tokenizer

def group(prompt):
    "K sampled completions of one prompt: their token ids and texts (no grad)."
    text = processor.apply_chat_template(prompt.messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[prompt.image], return_tensors="pt")
    with torch.no_grad():
        model.eval()
        out = model.generate(**inputs, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=MAX_NEW,
                             num_return_sequences=K, pad_token_id=tok.pad_token_id or tok.eos_token_id)
        model.train()
    completion = out[:, inputs["input_ids"].shape[1]:]
    return inputs, completion, processor.batch_decode(completion, skip_special_tokens=True)

def sequence_logps(inputs, completion):
    "Sum of the completion tokens' log-probabilities, per sequence (with grad); tokens after the first EOS are masked."
    ids = torch.cat([inputs["input_ids"].repeat(K, 1), completion], 1)
    eos = (completion == tok.eos_token_id) | (completion == tok.pad_token_id)
    mask = (torch.cumsum(eos.int(), 1) - eos.int()) == 0            # up to and including the first EOS
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=inputs["pixel_values"].repeat(K, 1),
                   image_grid_thw=inputs["image_grid_thw"].repeat(K, 1)).logits
    n = completion.shape[1]
    logp = torch.log_softmax(logits[:, -n - 1:-1].float(), -1).gather(-1, completion[..., None])[..., 0]
    return (logp * mask).sum(1)

def advantages(r):
    r = np.asarray(r, float)
    return (r - r.mean()) / (r.std() + 1e-4) if r.std() > 0 else np.zeros_like(r)

sampled = []
for pair in pairs:
    for side, prompt in enumerate((pair.original, pair.augmented)):
        inputs, completion, texts = group(prompt)
        answers = [parse_answer(t, "boolean") for t in texts]
        truth = pair.ground_truth_augmented if side else pair.ground_truth
        sampled.append(dict(pair=pair, side=side, inputs=inputs, completion=completion, answers=answers,
                            accuracy=[float(a == truth) for a in answers],
                            claims=[None if a is None else canonical_claim(a, prompt.question) for a in answers],
                            task=prompt.question.task))
for g in range(0, len(sampled), 2):                                 # the consistency reward of each pair's two groups
    x, xp = sampled[g], sampled[g + 1]
    r, rp = consistency_rewards(x["answers"], xp["answers"], x["pair"].relation, strategy="minimal")
    x["consistency"], xp["consistency"] = list(r), list(rp)
majority = {}
for s in sampled:
    c = [v for v in s["claims"] if v is not None]
    majority.setdefault(s["task"], []).extend(c)
majority = {t: int(np.mean(c) >= 0.5) for t, c in majority.items()}
for s in sampled: s["fixed"] = [float(c == majority[s["task"]]) for c in s["claims"]]

grads = {k: [torch.zeros_like(p) for p in params] for k in ("accuracy", "consistency", "fixed")}
for s in sampled:
    logps = sequence_logps(s["inputs"], s["completion"])
    for k, g in grads.items():
        a = torch.tensor(advantages(s[k]), dtype=logps.dtype)
        if not a.abs().sum(): continue
        for buf, d in zip(g, torch.autograd.grad((a * logps).sum(), params, retain_graph=True, allow_unused=True)):
            if d is not None: buf += d
flat = {k: torch.cat([b.flatten() for b in g]).double() for k, g in grads.items()}
cos = lambda a, b: float(a @ b / (a.norm() * b.norm() + 1e-30))
A = torch.stack([flat["accuracy"], flat["fixed"]], 1)
coef = torch.linalg.lstsq(A, flat["consistency"][:, None]).solution[:, 0]
explained = 1 - float((flat["consistency"] - A @ coef).norm() ** 2 / flat["consistency"].norm() ** 2)
sampled_acc = np.mean([v for s in sampled for v in s["accuracy"]])
print(f"{'marker swap' if marker_swap else 'paper set'}, {n_pairs} pairs x 2 groups x K={K}, seed {seed}: sampled accuracy "
      f"{sampled_acc:.3f}, majority claims {majority}")
print(f"cos(consistency, accuracy) = {cos(flat['consistency'], flat['accuracy']):+.3f}")
print(f"cos(consistency, fixed)    = {cos(flat['consistency'], flat['fixed']):+.3f}")
print(f"cos(accuracy, fixed)       = {cos(flat['accuracy'], flat['fixed']):+.3f}")
print(f"consistency ~ {coef[0]:+.3f} accuracy {coef[1]:+.3f} fixed; explains {explained:.3f} of its squared norm "
      f"({time.time() - start:.0f} s)")
