"""Issue 23: does the time of a decoded token follow its arithmetic or its number of operators?

The H100 decoded a batch of 64 at 35-51 ms per token with merged LoRA weights at 7B (session 23), far above
what reading the weights costs (about 15 GB per token at 3.35 TB/s: 4.5 ms). Per token the host runs the Python of
transformers' `generate` and of the model's forward and dispatches each operator (on a GPU each is also a kernel
launch); that work depends on the number and kind of layers, not on their width. So it is read here on the CPU from
a model with the 7B's 28 decoder layers at the tiny model's width (hidden 64, the tiny vocabulary), where the
arithmetic is next to nothing: what a token costs is the host's work plus the CPU's own execution of each small
kernel.

For the model with its LoRA merged (plain weights: merged sampling, what vLLM serves too), with peft's LoRA layers
(r = 32 on the project's targets, in train mode as TRL samples; TRL's default sampling path), and merged with
transformers' compiled decoding step (inductor on the CPU: fused C++ kernels, no CUDA graphs), batch 64, sampling as
TRL does (temperature 1, `min_new_tokens` = `max_new_tokens`), the arms in ABCCBA order twice:
* wall milliseconds per decoded token: (time of 40 new tokens - time of 8) / 32;
* per decoded token, from a profile of 8 and of 24 new tokens: the leaf operators that would be kernels on a GPU
  (views, allocations and the sampler's CPU-only assert left out), the wall time under the profiler, and the Python
  frames' self time within it (read from the profile's trace: `benchmarks/step_profile.py`).

Decision (2026-11-26, session 26; `results/decode_host_overhead_probe_2026-11-26.txt`, torch 2.13 and 2.11): merged
20-21 ms per token, peft's LoRA 40-42 ms with 2.2 times the operators, the H100's 7B ratio (LoRA adds about 1% of the
arithmetic): decoding time follows the operator count, so eager `generate` cannot reach the paper's 23.2 s per step;
graphs (compiled decoding with CUDA graphs, vLLM) are the route. Compiling on the CPU gains nothing (no CUDA graphs
there). Summarised in `benchmarks/README.md`, "decoding time follows the operator count".

    OMP_NUM_THREADS=2 python research/decode_host_overhead_probe.py
"""
import statistics
import sys
import time
from pathlib import Path

import torch
from PIL import Image
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import step_profile   # noqa: E402
from bench_step_time import ARCHITECTURES, build_model   # noqa: E402

BATCH, SHORT, LONG = 64, 8, 40


def narrow_7b(processor):
    "The tiny model's config with the 7B's number of decoder layers; random weights, float32, eval mode."
    from consistency_amp.training.tiny_models import tiny_qwen2_5_vl_config
    config = tiny_qwen2_5_vl_config(processor.tokenizer)
    layers = config.text_config.num_hidden_layers = ARCHITECTURES["7B"]["text"]["num_hidden_layers"]
    config.text_config.layer_types = ["full_attention"] * layers   # the config derived it for the tiny model's 2
    torch.manual_seed(0)
    return build_model(config, "cpu", torch.float32).eval()


def with_lora(model):
    "The project's LoRA (r = 32 on the language model's projections, dropout 0.05) around `model`, in train mode as TRL samples."
    from peft import get_peft_model
    from consistency_amp.training.models import lora_config
    return get_peft_model(model, lora_config()).train()


def batch(processor):
    "64 rows of one image question, as a GRPO group repeats its prompt."
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which object is closer?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    image = Image.new("RGB", (56, 56), (120, 80, 40))
    return processor(text=[text] * BATCH, images=[image] * BATCH, return_tensors="pt", padding=True)


def generate(model, inputs, new_tokens: int, compiled: bool = False):
    """Sample `new_tokens` tokens for every row; `compiled`: on a static cache of 128 positions (every call the same
    shape) with transformers' compiled decoding step, which it compiles on CUDA only unless told otherwise."""
    from transformers import CompileConfig
    settings = {}
    if compiled:
        compile_config = CompileConfig(mode="default"); compile_config._compile_all_devices = True
        settings = dict(cache_implementation="static", max_cache_len=128, compile_config=compile_config,
                        disable_compile=False)
    with torch.no_grad():
        return model.generate(**inputs, do_sample=True, temperature=1.0, top_p=1.0, top_k=None,
                              min_new_tokens=new_tokens, max_new_tokens=new_tokens, **settings)


# Operators that make no kernel on a GPU (views, metadata, allocation): left out of the kernel-like count
NO_KERNEL = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::t", "aten::transpose",
             "aten::permute", "aten::as_strided", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select",
             "aten::expand", "aten::expand_as", "aten::alias", "aten::detach", "aten::lift_fresh", "aten::empty",
             "aten::empty_strided", "aten::empty_like", "aten::resolve_conj", "aten::resolve_neg", "aten::split",
             "aten::chunk", "aten::narrow", "aten::unbind", "aten::result_type", "aten::size", "aten::stride",
             "aten::contiguous", "aten::broadcast_tensors", "aten::unflatten", "aten::flatten", "aten::view_as",
             "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::dim", "aten::numel",
             "aten::_assert_async"}


def counts(prof, wall_s: float) -> dict:
    "Leaf operators that would be kernels, the Python frames' self milliseconds, and the profiled wall milliseconds."
    leaves = [e for e in prof.events() if e.name.startswith("aten::")
              and not any(c.name.startswith("aten::") for c in e.cpu_children)]
    frames = step_profile.python_frames_from_trace(prof)
    return dict(kernels=sum(e.name not in NO_KERNEL for e in leaves),
                python_ms=sum(r["self_us"] for k, r in frames.items()   # threads parked on a lock left out
                              if step_profile.PYTHON_FRAME.match(k) and not step_profile.IDLE.match(k)) / 1e3,
                profiled_ms=wall_s * 1e3)


def per_token_profile(model, inputs) -> dict:
    "Per decoded token: (the counts of a profile of 24 new tokens - those of 8) / 16."
    got = {}
    for n in (8, 24):
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            start = time.perf_counter(); generate(model, inputs, n); wall = time.perf_counter() - start
        got[n] = counts(prof, wall)
    return {k: (got[24][k] - got[8][k]) / 16 for k in got[8]}


def main():
    from consistency_amp.training.models import TINY_MODEL, load_processor
    processor = load_processor(TINY_MODEL)
    inputs = batch(processor)
    merged = narrow_7b(processor)
    arms = {"merged (plain weights)": (merged, False), "peft LoRA r=32": (with_lora(narrow_7b(processor)), False),
            "merged, compiled": (narrow_7b(processor), True)}   # the same seeded weights as `merged`
    for model, compiled in arms.values(): generate(model, inputs, 4, compiled)   # warm-up (and compilation)
    times = {name: [] for name in arms}
    for name in (list(arms) + list(arms)[::-1]) * 2:   # ABCCBA twice
        model, compiled = arms[name]
        t0 = time.perf_counter(); generate(model, inputs, SHORT, compiled); t1 = time.perf_counter()
        generate(model, inputs, LONG, compiled); t2 = time.perf_counter()
        times[name].append(((t2 - t1) - (t1 - t0)) / (LONG - SHORT) * 1e3)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {BATCH}, 28 decoder layers at hidden "
          f"{merged.config.text_config.hidden_size}")
    print(f"{'per decoded token':<24}{'ms (4 runs)':>28}{'median':>8}{'kernel-like ops':>17}"
          f"{'profiled ms':>13}{'Python self ms':>16}")
    for name, (model, compiled) in arms.items():
        # the compiled arm is not profiled: its operators are inductor's fused kernels, not comparable
        p = per_token_profile(model, inputs) if not compiled else None
        print(f"{name:<24}{', '.join(f'{t:.1f}' for t in times[name]):>28}{statistics.median(times[name]):>8.1f}"
              + (f"{p['kernels']:>17.0f}{p['profiled_ms']:>13.1f}{p['python_ms']:>16.1f}" if p else ""), flush=True)


if __name__ == "__main__":
    main()
