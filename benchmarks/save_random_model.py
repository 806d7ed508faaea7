"""Save a random-weight Qwen2.5-VL of a released architecture (3B, 7B) or the tiny one, with the tiny model's
tokenizer and processor, to a folder: what vLLM, which builds its engine from a folder, evaluates in
`vllm_device_check.sh` (no weights can be downloaded here or on the lent GPU machines).

    python benchmarks/save_random_model.py --arch tiny --out /tmp/random-tiny     # CPU, seconds
    python benchmarks/save_random_model.py --arch 3B --out /tmp/random-3B         # GPU machine, bf16
    python benchmarks/save_random_model.py --arch 3B --out /tmp/random-3B --adapter-out /tmp/random-3B-lora
                                     # and a LoRA adapter on it, as a run saves one: what vLLM gets as a LoRARequest
"""
import argparse
from pathlib import Path

import torch
from transformers import GenerationConfig

from bench_step_time import ARCH_CHOICES, RELEASED_PIXELS, TINY_ARCHITECTURES, build_model, model_config


def save_random_model(arch: str, out, device: str = "cpu", initializer_range: float | None = None, seed: int = 0) -> Path:
    "Write a random `arch` model (bf16 on a GPU, float32 on the CPU; weights of std `initializer_range`, default transformers' 0.02, drawn from `seed`) and the tiny processor to `out`; the folder."
    from consistency_amp.training.models import TINY_MODEL, load_processor
    processor = load_processor(TINY_MODEL)
    if arch not in TINY_ARCHITECTURES: processor.image_processor.size = dict(RELEASED_PIXELS)   # the released models' image budget
    tokenizer = processor.tokenizer
    config = model_config(arch, tokenizer)
    if initializer_range is not None:
        for part in (config, config.text_config, config.vision_config): part.initializer_range = initializer_range
    # seeded: an unseeded draw once (session 49) gave a model whose greedy answer was the same for every prompt of the
    # square pairs, and vllm_cpu_check's comparisons need answers that differ
    torch.manual_seed(seed)
    model = build_model(config, device, torch.float32 if device == "cpu" else torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.pad_token_id, pad_token_id=tokenizer.pad_token_id,
                                               eos_token_id=[tokenizer.eos_token_id,
                                                             tokenizer.convert_tokens_to_ids("<|endoftext|>")])
    out = Path(out); model.save_pretrained(out); processor.save_pretrained(out)
    return out


def save_random_adapter(model_folder, out, seed: int = 0, device: str = "cpu", std: float = 0.02, rank: int | None = None) -> Path:
    "Put the project's LoRA (`training.models.load_model`: r = 32 on the language model, or `rank` with alpha = 2 x rank) on the model in `model_folder`, move `lora_B` off zero by seeded noise of `std` (so the adapter changes the answers), and save it as a run saves its adapter; the folder."
    from consistency_amp.training.models import load_model
    model, _ = load_model(model_folder, device=device, **(dict(lora_r=rank, lora_alpha=2 * rank) if rank else {}))
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name: p.copy_((torch.randn(p.shape, generator=noise) * std).to(p))
    model.save_pretrained(out)
    return Path(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="3B", choices=ARCH_CHOICES)
    ap.add_argument("--out", required=True, type=Path, help="the folder to write (must not exist)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--adapter-out", type=Path, default=None,
                    help="also save a random LoRA adapter of the project's configuration on that model here (must not exist)")
    args = ap.parse_args()
    for name, folder in (("--out", args.out), ("--adapter-out", args.adapter_out)):
        if folder is not None and folder.exists(): ap.error(f"{name} {folder} exists: give a new folder")
    print(f"random {args.arch} model saved to {save_random_model(args.arch, args.out, args.device)}")
    if args.adapter_out is not None:
        print(f"random LoRA adapter saved to {save_random_adapter(args.out, args.adapter_out, device=args.device)}")
