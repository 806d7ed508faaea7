"""Issue 23: does `VLLMDecoder` answer faster per question in larger calls? (vLLM's CPU build, the tiny random model)

The evaluation answered each (task, source) in calls of `--batch_size` prompts, 16 by default (for transformers'
`generate`), and the vllm backends followed the same batches. vLLM schedules the prompts of one call itself, so larger
calls should decode more rows per step. Times one engine answering the same prompts in calls of 16 and in calls of
the decoder's own batch (`VLLMDecoder.batch_size`, the engine's max_num_seqs: 256 on the CPU, so one call here),
interleaved:

    OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv-vllm-cpu/bin/python research/vllm_eval_batch_probe.py

Found (2026-11-28, session 45): 92 prompts of at most 64 new tokens took 0.94-1.49 s in calls of 16 and 0.50-0.61 s in
one call (two runs). Session 47 (2026-11-29), after the vllm backends took the engine's max_num_seqs as their default
batch (`held_out.prompts_per_call`): see benchmarks/README.md, "The evaluation's batch on vLLM". The CPU is not the
GPU: the plan's call measures the 7B there.
"""
import os, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from vllm_cpu_check import ARCH, cpu_engine_settings, training_examples
from save_random_model import save_random_model

def main():
    from consistency_amp.evaluation.vllm_decoder import VLLMDecoder
    from consistency_amp.training.trainer import PairedPromptDataset, spatial_pair_dataset
    from consistency_amp.world.prompts import make_prompt_pair
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB of KV cache (as vllm_cpu_check.py)
    cpu_engine_settings()
    tmp = Path(tempfile.mkdtemp())
    folder = save_random_model(ARCH, tmp / "model", initializer_range=0.3)
    prompts = PairedPromptDataset(spatial_pair_dataset(training_examples(tmp, 24), make_prompt_pair, seed=0))
    n = min(2 * len(prompts), 96)
    rows = [prompts[key] for key in range(n)]
    engine = VLLMDecoder(folder, max_new_tokens=64, max_model_len=1024)
    engine.complete(rows[:16])   # warm-up
    own = engine.batch_size
    print(f"the decoder's own batch (the engine's max_num_seqs): {own}", flush=True)
    for size in (16, own, own, 16, 16, own, own, 16):
        start = time.perf_counter()
        texts = [t for i in range(0, n, size) for t in engine.complete(rows[i:i + size])]
        print(f"batch {size:>3}: {n} prompts in {time.perf_counter() - start:.2f} s", flush=True)

if __name__ == "__main__": main()
