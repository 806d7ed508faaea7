"""Issue 23: which operators does a decoded token run, and how many do the decoding settings take away?

On a GPU, eager decoding is launch-bound: its time per token follows the number of operators (each one kernel or
more), not their arithmetic (`benchmarks/README.md`, "decoding time follows the operator count";
`decode_host_overhead_probe.py`). Here the operators that transformers' `generate` calls from Python per decoded
token are counted by name (a `TorchFunctionMode`: every torch function and tensor method, attribute reads left out;
deterministic, no profiler), on the tiny model with the 7B's 28 decoder layers in bfloat16 (so that the norms' casts
are real copies, as on the GPU) with the project's LoRA sampled from merged weights (`merged_lora_weights`, as
`merge_lora_for_generation`), batch 64, sampling as TRL does: with transformers' RMSNorms, with `fuse_rms_norms`
(each norm one `rms_norm` call, which CUDA runs as one fused kernel), with that and `rotary_in_one_pass` (queries and
keys rotated in one pass), and with those and each group's projections stacked (`fuse_projections`: q, k, v and
gate, up each one matmul). Per decoded token = (calls of 24 new tokens - calls of 8) / 16. Also the CPU's milliseconds per decoded token in float32 for each, ABCCBA twice (on the
CPU `rms_norm` decomposes into the same kernels, so this shows mostly the Python side of the change).

Decision (2026-11-27, session 29; `results/decode_operator_census_2026-11-27.txt`): 1,178 calls per decoded token,
42 per decoder layer, 16 of them the two norms; fused norms 779 (-34%), with the rotary embedding in one pass too
667 (-43%); on this CPU neither changes the time per token measurably, so only a GPU can say what they save.
Summarised in `benchmarks/README.md`, "one operator per RMSNorm, and the rotary embedding in one pass".
Session 30 (`results/decode_operator_census_stacked_2026-11-27.txt`, sampling from merged LoRA weights, the same
counts as plain weights for the first three): with each group's projections stacked too, 583 (-51%).

    OMP_NUM_THREADS=2 python research/decode_operator_census.py
"""
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode, resolve_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_host_overhead_probe import batch, generate, narrow_7b   # noqa: E402
from contextlib import nullcontext   # noqa: E402
from decode_host_overhead_probe import with_lora   # noqa: E402
from consistency_amp.training.generation import fuse_rms_norms, merged_lora_weights, rotary_in_one_pass   # noqa: E402
from consistency_amp.training.models import TINY_MODEL, load_processor   # noqa: E402

SHORT, LONG = 8, 24
# calls that make no kernel on a GPU: views and metadata
NO_KERNEL = {"view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "contiguous", "size",
             "dim", "__getitem__", "split", "chunk", "narrow", "flatten", "unflatten", "numel", "t", "item", "tolist",
             "__len__", "__bool__", "__index__", "__format__", "__hash__", "__eq__", "__ne__", "is_floating_point",
             "get_device", "is_contiguous", "stride", "data_ptr", "detach", "__iter__", "__int__", "__float__"}


class OperatorCalls(TorchFunctionMode):
    "Torch functions and tensor methods called from Python, by name; attribute reads left out."
    def __init__(self):
        super().__init__(); self.calls = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = resolve_name(func) or getattr(func, "__name__", repr(func))
        if not name.endswith("__get__"): self.calls[name.rsplit(".", 1)[-1]] += 1
        return func(*args, **(kwargs or {}))


def per_token_calls(model, inputs) -> Counter:
    got = {}
    for n in (SHORT, LONG):
        with OperatorCalls() as counted: generate(model, inputs, n)
        got[n] = counted.calls
    return Counter({k: (got[LONG][k] - got[SHORT][k]) / (LONG - SHORT) for k in got[LONG] | got[SHORT]})


def ms_per_token(model, inputs) -> float:
    t0 = time.perf_counter(); generate(model, inputs, SHORT); t1 = time.perf_counter()
    generate(model, inputs, 40); t2 = time.perf_counter()
    return ((t2 - t1) - (t1 - t0)) / (40 - SHORT) * 1e3


def main():
    processor = load_processor(TINY_MODEL)
    inputs = batch(processor)
    model = with_lora(narrow_7b(processor)).eval()   # sampled from merged weights, as merge_lora_for_generation
    layers = model.config.text_config.num_hidden_layers
    half = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in inputs.items()}
    model.to(torch.bfloat16); generate(model, half, 4)
    arms = {"transformers": (False, False, False), "fused norms": (True, False, False),
            "+ rotary one pass": (True, True, False), "+ stacked projections": (True, True, True)}
    def run(arm, measure, *a):
        fused, one_pass, stacked = arms[arm]
        fuse_rms_norms(model, fused=fused)
        with merged_lora_weights(model, fuse_projections=stacked), \
                (rotary_in_one_pass(model) if one_pass else nullcontext()):
            return measure(model, *a)
    census = {arm: run(arm, per_token_calls, half) for arm in arms}
    print(f"torch {torch.__version__}; batch {len(inputs['input_ids'])}, {layers} decoder layers, bfloat16; "
          f"operator calls per decoded token (kernel-making: views and metadata left out), LoRA sampled from merged weights")
    names = sorted(set().union(*census.values()), key=lambda k: -census["transformers"][k])
    print(f"{'operator':<32}" + "".join(f"{arm:>24}" for arm in arms))
    for k in names:
        if k in NO_KERNEL or max(c[k] for c in census.values()) < 0.5: continue
        print(f"{k:<32}" + "".join(f"{census[arm][k]:>24.1f}" for arm in arms))
    totals = {arm: sum(v for k, v in c.items() if k not in NO_KERNEL) for arm, c in census.items()}
    print(f"{'kernel-making calls per token':<32}" + "".join(f"{totals[arm]:>24.1f}" for arm in arms))
    print(f"{'per decoder layer, about':<32}" + "".join(f"{totals[arm] / layers:>24.1f}" for arm in arms))
    print(f"{'against transformers':<32}" + "".join(f"{(totals[arm] / totals['transformers'] - 1) * 100:>23.0f}%"
                                                    for arm in arms))
    model.float(); fuse_rms_norms(model, fused=False); generate(model, inputs, 4)
    times = {arm: [] for arm in arms}
    for arm in (list(arms) + list(arms)[::-1]) * 2:
        times[arm].append(run(arm, ms_per_token, inputs))
    for arm, t in times.items():
        print(f"CPU float32 ms per decoded token, {arm}: {', '.join(f'{x:.1f}' for x in t)} "
              f"(median {statistics.median(t):.1f})")


if __name__ == "__main__":
    main()
