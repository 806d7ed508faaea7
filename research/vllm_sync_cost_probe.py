"""Probe (issue 23): the Python cost of TRL 1.16's colocated weight sync (each parameter its own `load_weights` call)
on a Qwen2.5-VL with the 7B's 28 text layers and 32 vision blocks at the tiny width (next to no arithmetic), on vLLM's
CPU build: all 728 parameters one call each, against only the adapter's merged weights one call each, and in one call;
the engine's state checked equal after each. Run: OMP_NUM_THREADS=2 .venv-vllm-cpu/bin/python research/vllm_sync_cost_probe.py"""
import os, sys, time, json, statistics
from pathlib import Path
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks")); sys.path.insert(0, str(REPO))

import torch
from transformers import GenerationConfig
from bench_step_time import model_config, build_model
from vllm_cpu_check import cpu_engine_settings
from consistency_amp.training.models import TINY_MODEL, load_processor, load_model

folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/probe-7B-shaped")
if not folder.exists():
    processor = load_processor(TINY_MODEL); tok = processor.tokenizer
    config = model_config("tiny-vllm-cpu", tok)
    config.text_config.num_hidden_layers = 28; config.text_config.layer_types = ["full_attention"] * 28
    config.vision_config.depth = 32; config.vision_config.fullatt_block_indexes = [7, 15, 23, 31]
    model = build_model(config, "cpu", torch.float32)
    model.generation_config = GenerationConfig(pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id])
    model.save_pretrained(folder); processor.save_pretrained(folder)
cpu_engine_settings()
import vllm
llm = vllm.LLM(model=str(folder), max_model_len=1024, limit_mm_per_prompt={"image": 1, "video": 0}, enforce_eager=True)
engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
peft, _ = load_model(folder, lora_dropout=0.0, device="cpu")
with torch.no_grad():
    g = torch.Generator().manual_seed(0)
    for n, p in peft.named_parameters():
        if "lora_B" in n: p.copy_(torch.randn(p.shape, generator=g) * 0.1)
from peft.tuners.lora import LoraLayer
changed_modules = {n for n, m in peft.named_modules() if isinstance(m, LoraLayer)}

def trl_names(model, only_changed):
    for name, param in model.named_parameters():
        if only_changed and not any(name.startswith(m + ".") for m in changed_modules): continue
        name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if model.prefix in name or "original_module" in name: continue
        yield name, param.data

def sync(arm):
    peft.merge_adapter()
    t0 = time.perf_counter()
    items = list(trl_names(peft, arm != "all"))
    if arm == "one call": engine_model.load_weights(items)
    else:
        for item in items: engine_model.load_weights([item])
    t = time.perf_counter() - t0
    peft.unmerge_adapter()
    return t, len(items)

def engine_state(): return {n: p.detach().clone() for n, p in engine_model.named_parameters()}
arms = ["all", "changed", "one call"]
sync("all"); ref = engine_state()
for arm in arms[1:]:
    # reset the engine's changed weights to something else, then sync: must land on the same state as 'all'
    with torch.no_grad():
        for n, p in engine_model.named_parameters(): p.add_(1.0) if "layers" in n and "proj" in n else None
    sync(arm); got = engine_state()
    bad = [n for n in ref if not torch.equal(ref[n], got[n])]
    print(f"{arm}: engine state equal to the full sync's: {not bad} ({len(bad)} differ)")
times = {a: [] for a in arms}; counts = {}
for rep in range(6):
    for arm in (arms if rep % 2 == 0 else arms[::-1]):
        t, n = sync(arm); times[arm].append(t); counts[arm] = n
for arm in arms:
    print(f"{arm:9s} {counts[arm]:5d} tensors: median {statistics.median(times[arm])*1e3:7.1f} ms "
          f"({min(times[arm])*1e3:.1f}-{max(times[arm])*1e3:.1f}), {statistics.median(times[arm])/counts[arm]*1e6:.0f} us per tensor")
print(json.dumps({a: [round(x, 4) for x in v] for a, v in times.items()}))
