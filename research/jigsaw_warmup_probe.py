"""Probe (issue 24, Figure 5 controlled): can a longer format warm-up (`training.pretext_base`) that draws the Visual
Jigsaw tasks more often teach the base to write permutations? Val world only (the experiment's `val_world_seed`).

    python research/jigsaw_warmup_probe.py --steps 1200 --weight 3 --image-weight 6 --every 200 [--json OUT]

The training loop is `pretext_base.warm_up`'s (same settings, rehearsal, RNG streams), with the examples of
`pretext_base.pretext_examples` (jigsaw_image drawn `--image-weight` times as often, jigsaw_3d `--weight` times); every
`--every` steps: the greedy format rate of each pretext task (48 val prompts for the two Visual Jigsaw tasks, 16 for the
others) and the format rate of K = 8 samples at temperature 1 on 16 prompts; at the end the depth and size greedy accuracy
on 300 val questions each. About 10 minutes of set-up, then about 1 s a step on one core; 14-15 GB of memory (two at
once did not fit in 24 GB).

Decision (session 15, 2026-11-25; numbers in figures/README.md, "Figure 5, controlled"): 1200 steps with weights 6 / 3
teach the 6-point order (greedy format 1.0, sampled 0.79) but not the 9-tile one (greedy 0.0, sampled 0.14); 1600 steps
with weights 12 / 3 did no better. The default warm-up stays unweighted until a warm-up writes 9-permutations.
"""
import argparse, json, sys, time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from pretext_base_probe import complete   # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1200); ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight", type=int, default=3, help="how many times as often jigsaw_3d is drawn")
    ap.add_argument("--image-weight", type=int, default=6, help="how many times as often jigsaw_image is drawn")
    ap.add_argument("--every", type=int, default=200); ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1); torch.manual_seed(0)
    from consistency_amp.evaluation.held_out import evaluate
    from consistency_amp.science.experiment import ExperimentConfig, world_config
    from consistency_amp.reward.ssl import SSL_TASKS, ssl_format_reward
    from consistency_amp.training.models import load_model
    from consistency_amp.training.pretext_base import (PRETEXT_FORMAT, _base_recipe, pretext_examples, pretext_sft_batch,
                                                       spatial_rehearsal)
    from consistency_amp.training.pretraining import BaseRecipe, pretraining_world
    from consistency_amp.world.ssl_tasks import ssl_examples
    from consistency_amp.world.synthetic import default_world

    vj = ("jigsaw_image", "jigsaw_3d")
    settings = PRETEXT_FORMAT | dict(steps=a.steps, lr=a.lr, weights={"jigsaw_image": a.image_weight, "jigsaw_3d": a.weight})
    name = "spatial-base-large"
    model, processor = load_model(name, lora=False, dtype=torch.float32, device="cpu")
    examples = pretext_examples(ssl_examples(pretraining_world(_base_recipe(name)[0] or BaseRecipe()), seed=0), settings)
    rehearse = spatial_rehearsal(name, processor, settings)
    val_root = default_world(world_config(ExperimentConfig(), val=True))
    val = ssl_examples(val_root, seed=1)

    def probe(step):
        model.eval(); res = {"step": step}
        for t in SSL_TASKS:
            ex = val[t][:a.n if t in vj else 16]
            greedy = [c[0] for i in range(0, len(ex), 16) for c in complete(model, processor, ex[i:i + 16])]
            res[t] = float(np.mean([ssl_format_reward(g, e.answer, t) for g, e in zip(greedy, ex)]))
            if t in vj:
                groups = complete(model, processor, ex[:16], sample=True, k=8)
                res[f"{t}_sampled"] = float(np.mean([ssl_format_reward(c, e.answer, t) for g, e in zip(groups, ex) for c in g]))
                res[f"{t}_example"] = greedy[0]
        model.train(); print(json.dumps(res), flush=True); return res

    rng = np.random.default_rng(settings["seed"])   # warm_up's loop, with a probe every `--every` steps
    params = [p for n, p in model.named_parameters() if ".visual." not in f".{n}."]
    for p in params: p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=settings["lr"], weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
    model.train(); t0, log = time.perf_counter(), []
    for step in range(settings["steps"]):
        chosen = [examples[i] for i in rng.choice(len(examples), size=settings["batch"], replace=False)]
        loss = model(**pretext_sft_batch(chosen, processor, rng)).loss + model(**rehearse(rng)).loss
        loss.backward(); torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step(); schedule.step(); optimizer.zero_grad()
        if (step + 1) % 20 == 0: print(f"step {step + 1} loss {loss.item():.3f} {time.perf_counter() - t0:.0f} s", flush=True)
        if (step + 1) % a.every == 0: log.append(probe(step + 1))
    model.eval()
    ev = evaluate(model, processor, tasks=("depth", "size"), sources=("SUNRGBD",), data_root=val_root, max_examples=300,
                  progress=False)
    spatial = {r["task"]: r["accuracy"] for r in ev["results"]}
    print(f"spatial (val, greedy, 300 each): {spatial}", flush=True)
    if a.json: Path(a.json).write_text(json.dumps(dict(args=vars(a), probes=log, spatial=spatial), indent=1) + "\n")


if __name__ == "__main__":
    main()
