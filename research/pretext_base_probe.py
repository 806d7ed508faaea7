"""Probe (issue 24, Figure 5 controlled): does the pretext format warm-up (`training.pretext_base`) give a base that
answers every pretext task in format, at about chance, with a sampled group that varies, and whose spatial answers are
those of the base? Val world only (the experiment's `val_world_seed`), never the test world.

    python research/pretext_base_probe.py [--base spatial-base-large] [--n 96] [--json OUT]

Builds the warmed base on first use (about 2-4 minutes on one core), then: per pretext task, greedy format rate and
reward, and the format rate and distinct answers of K = 8 samples at temperature 1 on 16 prompts; depth and size greedy
accuracy of the base and of the warmed base on 300 val questions each. Results: figures/README.md, "Figure 5, controlled".
"""
import argparse, json, time
import numpy as np
import torch


def complete(model, processor, examples, sample: bool = False, k: int = 1, max_new_tokens: int = 32) -> list[list[str]]:
    texts = [processor.apply_chat_template(e.messages(), tokenize=False, add_generation_prompt=True) for e in examples]
    side, processor.tokenizer.padding_side = processor.tokenizer.padding_side, "left"
    try: inputs = processor(text=texts, images=[im for e in examples for im in e.images], padding=True, return_tensors="pt")
    finally: processor.tokenizer.padding_side = side
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=k) if sample else dict(do_sample=False)
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, **kw)
    decoded = processor.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    return [decoded[i * k:(i + 1) * k] for i in range(len(examples))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="spatial-base-large"); ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-base", action="store_true", help="measure the warmed base only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from consistency_amp.evaluation.held_out import evaluate
    from consistency_amp.science.experiment import ExperimentConfig, world_config
    from consistency_amp.reward.ssl import SSL_TASKS, parse_ssl_answer, ssl_format_reward, ssl_reward
    from consistency_amp.training.models import load_model
    from consistency_amp.training.pretext_base import pretext_base_path
    from consistency_amp.world.ssl_tasks import ssl_examples
    from consistency_amp.world.synthetic import default_world

    t0 = time.perf_counter()
    warmed = pretext_base_path(args.base)
    print(f"warmed base: {warmed} ({time.perf_counter() - t0:.0f} s)", flush=True)
    val_root = default_world(world_config(ExperimentConfig(), val=True))
    built = ssl_examples(val_root, seed=1)
    result = dict(base=args.base, warmed=str(warmed), pretext={}, spatial={})
    for name in ((args.base,) if not args.skip_base else ()) + (str(warmed),):
        model, processor = load_model(name, lora=False)
        model.eval()
        label = "warmed" if name == str(warmed) else "base"
        for task in SSL_TASKS:
            ex = built[task][:args.n]
            greedy = [c[0] for i in range(0, len(ex), 16) for c in complete(model, processor, ex[i:i + 16])]
            fmt = np.mean([ssl_format_reward(g, e.answer, task) for g, e in zip(greedy, ex)])
            acc = np.mean([ssl_reward(g, e.answer, task) for g, e in zip(greedy, ex)])
            groups = complete(model, processor, ex[:16], sample=True, k=8)
            s_fmt = np.mean([ssl_format_reward(c, e.answer, task) for g, e in zip(groups, ex) for c in g])
            distinct = np.mean([len({str(parse_ssl_answer(c, task)) for c in g}) for g in groups])
            result["pretext"].setdefault(label, {})[task] = dict(greedy_format=fmt, greedy_reward=acc, sampled_format=s_fmt,
                                                                 distinct_answers_of_8=distinct)
            print(f"{label:7s} {task:20s} greedy format {fmt:.2f} reward {acc:.3f} | sampled format {s_fmt:.2f}, "
                  f"distinct answers {distinct:.1f} of 8 | e.g. {greedy[0]!r}", flush=True)
        ev = evaluate(model, processor, tasks=("depth", "size"), sources=("SUNRGBD",), data_root=val_root,
                      max_examples=300, progress=False)
        for r in ev["results"]:
            result["spatial"].setdefault(label, {})[r["task"]] = r["accuracy"]
        print(f"{label:7s} spatial (val, greedy, 300 each): {result['spatial'][label]}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json: open(args.json, "w").write(json.dumps(result, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
