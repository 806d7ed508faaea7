"""Issue 23: what does peft's forward cost per decoded token when sampling from merged weights?

With `merge_lora_for_generation` the adapters are off while sampling, and peft's LoRA layer forward then only calls
its base layer, after Python work of its own (argument checks, keyword pops, branches) at every call: 196 calls per
decoded token at 7B. On a GPU, eager decoding is host-bound (`benchmarks/README.md`, "decoding time follows the
operator count"), so host-side Python counts. `merged_lora_weights` now has each LoRA layer call its base layer
directly; this probe times a decoded token with that bypass and with peft's forward put back inside the same block,
on the tiny model with the 7B's 28 decoder layers (hidden 64: next to no arithmetic, so the time is the host's),
batch 64, sampling as TRL does, ABBA three times: per decoded token = (time of 40 new tokens - of 8) / 32.

Decision (2026-11-27, session 30; `results/peft_bypass_probe_2026-11-27.txt`): the bypass saves 0.45-1.0 ms per
decoded token here (-2% to -5%; three runs, torch 2.13 and 2.11), and is exact (the same operators on the same
weights), so `merged_lora_weights` keeps it; summarised in
`benchmarks/README.md`, "peft's forward bypassed while sampling from merged weights".

    OMP_NUM_THREADS=2 python research/peft_bypass_probe.py
"""
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from peft.tuners.lora import LoraLayer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_host_overhead_probe import batch, generate, narrow_7b, with_lora   # noqa: E402
from consistency_amp.training.generation import merged_lora_weights   # noqa: E402
from consistency_amp.training.models import TINY_MODEL, load_processor   # noqa: E402

SHORT, LONG = 8, 40


@contextmanager
def peft_forward_back(model):
    "Within `merged_lora_weights`' block: each LoRA layer's own (peft's) forward again, as before the bypass."
    layers = [m for m in model.modules() if isinstance(m, LoraLayer) and "forward" in m.__dict__]
    saved = [layer.__dict__.pop("forward") for layer in layers]
    try: yield
    finally:
        for layer, forward in zip(layers, saved): layer.forward = forward


def ms_per_token(model, inputs, bypassed: bool) -> float:
    with merged_lora_weights(model), (peft_forward_back(model) if not bypassed else torch.no_grad()):
        t0 = time.perf_counter(); generate(model, inputs, SHORT); t1 = time.perf_counter()
        generate(model, inputs, LONG); t2 = time.perf_counter()
    return ((t2 - t1) - (t1 - t0)) / (LONG - SHORT) * 1e3


def main():
    processor = load_processor(TINY_MODEL)
    inputs = batch(processor)
    model = with_lora(narrow_7b(processor)).eval()
    arms = {"peft's forward": False, "bypassed (merged_lora_weights)": True}
    for bypassed in arms.values(): ms_per_token(model, inputs, bypassed)   # warm-up
    times = {arm: [] for arm in arms}
    for arm in (list(arms) + list(arms)[::-1]) * 3: times[arm].append(ms_per_token(model, inputs, arms[arm]))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {len(inputs['input_ids'])}, "
          f"{model.config.text_config.num_hidden_layers} decoder layers at hidden {model.config.text_config.hidden_size}, "
          f"{sum(isinstance(m, LoraLayer) for m in model.modules())} LoRA layers, sampling from merged weights")
    for arm, t in times.items():
        print(f"{arm:<32} ms per decoded token {', '.join(f'{x:.2f}' for x in t)} (median {statistics.median(t):.2f})")
    base, new = (statistics.median(t) for t in times.values())
    print(f"bypass: {new - base:+.2f} ms per decoded token ({(new / base - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
