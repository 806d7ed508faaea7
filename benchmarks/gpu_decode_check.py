"""Decoding alone, on a GPU (issue 23): milliseconds per decoded token of transformers' `generate` for a batch of 64
rows (the paper's 8 prompts x K = 8 at the released image size), in the arms that change what a decoded token runs:

* peft's LoRA layers (TRL's default sampling path, train mode, LoRA dropout 0.05);
* merged weights (`merge_lora_for_generation`, the GPU recipes);
* merged, with every RMSNorm as torch's one `rms_norm` operator (`fused_rms_norm`);
* merged, fused norms, and queries and keys rotated in one pass (`rotary_in_one_pass`);
* all that, and each distinct prompt prefilled once (`share_prompt_prefill`): its prefill, not its decoded tokens;
* merged, fused norms, rotary in one pass, and each attention's q, k, v and each MLP's gate and up stacked and run as
  one matmul (`fuse_projections`);
* merged, fused norms and rotary in one pass on transformers' static KV cache, eager: the dynamic cache concatenates
  each layer's keys and values anew at every decoded token (a copy of the whole cache), the static one writes the
  new position in place but attends over its whole length (what `compile_generation` decodes on, uncompiled).

Before the arms, the exactness of the stacked projections: every row's next-token logits from the merged weights
with and without `fuse_projections` (largest difference, argmax agreement, bitwise or not).

Each arm samples as TRL does (temperature 1, exactly the asked number of new tokens) twice per round, 8 and 40 new
tokens: per decoded token = (time of 40 - time of 8) / 32, and the prefill = the time of 8 less 8 tokens' worth;
rounds in ABCDEFGGFEDCBA order, twice. Random weights of the released architecture (as bench_step_time.py), bf16 and SDPA on
CUDA, the image cache on (as the trainer). A step-level measurement costs a whole 7B step per arm; this costs a few
seconds, so one GPU call can read every decoding change. On a machine without CUDA it runs in float32 on the CPU
(`--arch tiny` for a quick check of the wiring). Results: benchmarks/README.md.

    python benchmarks/gpu_decode_check.py --arch 7B --json $OUT/decode_check_7B.json
"""
import argparse, json, statistics, sys, time
from contextlib import ExitStack
from pathlib import Path

import torch
from peft import get_peft_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step_time as b   # noqa: E402
from consistency_amp.training.image_features import install_image_cache, prefill_once_per_prompt   # noqa: E402
from consistency_amp.training.generation import (fuse_rms_norms, merged_lora_weights,   # noqa: E402
                                                 rotary_in_one_pass, static_cache_length)
from consistency_amp.training.models import lora_config   # noqa: E402

ARMS = {"LoRA layers": dict(merged=False, fused=False, one_pass=False, prefill=False),
        "merged": dict(merged=True, fused=False, one_pass=False, prefill=False),
        "merged + fused norms": dict(merged=True, fused=True, one_pass=False, prefill=False),
        "merged + fused norms + rotary one pass": dict(merged=True, fused=True, one_pass=True, prefill=False),
        "merged + fused + rotary + stacked projections": dict(merged=True, fused=True, one_pass=True, prefill=False,
                                                              stacked=True),
        "all + each prompt prefilled once": dict(merged=True, fused=True, one_pass=True, prefill=True),
        "merged + fused + rotary, static cache": dict(merged=True, fused=True, one_pass=True, prefill=False,
                                                        static=True)}
SHORT, LONG = 8, 40


def timed_generate(model, inputs, new_tokens: int, settings: dict) -> float:
    "Seconds to sample exactly `new_tokens` tokens for every row, in `settings`' arm."
    with ExitStack() as stack, torch.no_grad():
        if settings["merged"]: stack.enter_context(merged_lora_weights(model, settings.get("stacked", False)))
        if settings["one_pass"]: stack.enter_context(rotary_in_one_pass(model))
        if settings["prefill"]: stack.enter_context(prefill_once_per_prompt(model))
        fuse_rms_norms(model, fused=settings["fused"])
        if inputs["input_ids"].is_cuda: torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(**inputs, do_sample=True, temperature=1.0, top_p=1.0, top_k=None,
                             min_new_tokens=new_tokens, max_new_tokens=new_tokens,
                             **(dict(cache_implementation="static",   # one cache length for both numbers of tokens
                                     max_cache_len=static_cache_length(inputs["input_ids"].shape[1], LONG))
                                if settings.get("static") else {}))
        if inputs["input_ids"].is_cuda: torch.cuda.synchronize()
        assert out.shape[1] - inputs["input_ids"].shape[1] == new_tokens
        return time.perf_counter() - start


def stacked_exactness(model, inputs) -> dict:
    """The next-token logits of every row from the merged weights with each group's projections stacked
    (`fuse_projections`) and without: the largest difference, the share of rows whose most likely token agrees, and
    whether they are bitwise equal (on a GPU in bf16 the wider matmul may take another kernel; on the CPU, bitwise)."""
    logits = {}
    for stacked in (False, True):
        with merged_lora_weights(model, stacked), torch.no_grad():
            logits[stacked] = model(**inputs, logits_to_keep=1).logits[:, -1].float()
    return dict(max_abs_logit_difference=(logits[True] - logits[False]).abs().max().item(),
                argmax_agreement=(logits[True].argmax(-1) == logits[False].argmax(-1)).float().mean().item(),
                bitwise=torch.equal(logits[True], logits[False]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="7B", choices=b.ARCH_CHOICES)
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts (the paper's load: 4 pairs x 2 = 8)")
    ap.add_argument("--K", type=int, default=8, help="rows per prompt")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of ABCDEFGGFEDCBA")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    model, processor, device, dtype = b.random_model_and_processor(args.arch)
    model = get_peft_model(model, lora_config()).train()   # TRL samples in train mode: LoRA dropout on
    install_image_cache(model)
    inputs, _ = b.paper_prompts(processor, args.prompts, args.K, device)
    exactness = stacked_exactness(model, inputs)   # before any arm: transformers' norms, the merged weights
    for settings in ARMS.values(): timed_generate(model, inputs, 2, settings)   # warm-up: kernels chosen, images cached
    seconds = {arm: {SHORT: [], LONG: []} for arm in ARMS}
    for arm in (list(ARMS) + list(ARMS)[::-1]) * args.rounds:
        for n in (SHORT, LONG): seconds[arm][n].append(timed_generate(model, inputs, n, ARMS[arm]))
    rows = len(inputs["input_ids"])
    print(f"{args.arch}, {rows} rows ({args.prompts} prompts x K={args.K}), prompts of "
          f"{int(inputs['attention_mask'].sum(1).max())} tokens, {dtype} on "
          f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, torch {torch.__version__}")
    result = dict(arch=args.arch, rows=rows, dtype=str(dtype), torch=torch.__version__,
                  device_name=torch.cuda.get_device_name() if device.type == "cuda" else "cpu", arms={})
    print(f"stacked projections against merged, next-token logits of {rows} rows: max |difference| "
          f"{exactness['max_abs_logit_difference']:.3e}, argmax agreement {exactness['argmax_agreement']:.4f}, "
          f"bitwise {exactness['bitwise']}")
    result["stacked_exactness"] = exactness
    base = None
    for arm in ARMS:
        per_token = [(long - short) / (LONG - SHORT) * 1e3 for short, long in zip(seconds[arm][SHORT], seconds[arm][LONG])]
        prefill = [short - SHORT * t / 1e3 for short, t in zip(seconds[arm][SHORT], per_token)]
        median = statistics.median(per_token); base = base or median
        result["arms"][arm] = dict(ms_per_token=per_token, prefill_s=prefill, seconds=seconds[arm])
        print(f"{arm:<46} ms per decoded token {', '.join(f'{t:.1f}' for t in per_token)} (median {median:.1f}, "
              f"{(median / base - 1) * 100:+.0f}% against the LoRA layers; 512 tokens: {median * 512 / 1e3:.1f} s); "
              f"prefill {statistics.median(prefill):.2f} s")
    if args.json: Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
