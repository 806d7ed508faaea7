"""`share_prompt_forward` on a GPU in bf16 (issue 23): the completions' per-token log-probabilities and the LoRA
gradients of one batch of rows (each prompt repeated K times, as in a GRPO step), scored as TRL scores them (its fused
LM head on the whole rows) and with each distinct prompt forwarded once (`shared_prompt_logps`), in train mode with
gradient checkpointing as the trainer runs on a GPU; with each path's time and peak memory. Random weights of the
released architecture (as bench_step_time.py) with a random LoRA adapter (lora_B ~ N(0, 0.02)) and LoRA dropout 0; on
a machine without CUDA it runs in float32 on the CPU (`--arch tiny` for a quick check). Results: benchmarks/README.md.
It also scores TRL's path with every RMSNorm as torch's one `rms_norm` operator (`fused_rms_norm`, one fused kernel
on CUDA; `generation.fuse_rms_norms`), kept through the backward (gradient checkpointing recomputes the norms there).
"""
import argparse, sys, time
from pathlib import Path
import torch
from peft import get_peft_model
from trl.trainer.utils import add_fused_lm_head
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step_time as b
from consistency_amp.training.generation import fuse_rms_norms
from consistency_amp.training.image_features import install_image_cache, shared_prompt_logps
from consistency_amp.training.models import lora_config

ap = argparse.ArgumentParser()
ap.add_argument("--arch", default="7B", choices=b.ARCH_CHOICES)
ap.add_argument("--K", type=int, default=8, help="rows per prompt")
ap.add_argument("--prompts", type=int, default=8, help="distinct prompts (the paper's load: 4 pairs x 2 = 8)")
ap.add_argument("--completion-length", type=int, default=512)
args = ap.parse_args()
model, processor, device, dtype = b.random_model_and_processor(args.arch)
add_fused_lm_head(model, outputs=("log_probs", "entropy"))   # what GRPOTrainer does, before peft wraps the model
model = get_peft_model(model, lora_config(dropout=0.0))
with torch.no_grad():
    for n, p in model.named_parameters():
        if "lora_B" in n: p.normal_(0, 0.02)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
install_image_cache(model)
model.train()

prompts, _ = b.paper_prompts(processor, args.prompts, args.K, device)
L, B = args.completion_length, len(prompts["input_ids"])
g = torch.Generator().manual_seed(1)
words = torch.tensor(processor.tokenizer(" the lamp is closer than the sofa, about 3.5 meters to the left of the chair",
                                         add_special_tokens=False).input_ids)   # ordinary text tokens, no image tokens
completions = words[torch.randint(len(words), (B, L), generator=g)].to(device)
lengths = torch.randint(L // 2, L + 1, (B,), generator=g)
completion_mask = (torch.arange(L)[None] < lengths[:, None]).long().to(device)
input_ids = torch.cat([prompts["input_ids"], completions], 1)
attention_mask = torch.cat([prompts["attention_mask"], completion_mask], 1)
media = dict(pixel_values=prompts["pixel_values"], image_grid_thw=prompts["image_grid_thw"],
             mm_token_type_ids=torch.cat([prompts["mm_token_type_ids"], torch.zeros_like(completions)], 1))
weights = torch.randn(B, L, generator=torch.Generator().manual_seed(2)).to(device)

def trl_path():
    labels = input_ids.masked_fill(attention_mask == 0, -100); labels[:, :-L] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **media)
    return out.log_probs[:, -L:]

def shared_path(): return shared_prompt_logps(model, input_ids, attention_mask, L, **media)[0]

def scored(path, fused_norms=False):
    "Per-token log-probabilities, LoRA gradients, seconds and peak GiB of one forward and backward (`fused_norms`: with torch's rms_norm, forward and backward)."
    model.zero_grad(set_to_none=True)
    fuse_rms_norms(model, fused=fused_norms)
    if device.type == "cuda": torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
        logps = path()
    (logps.float() * weights * completion_mask).sum().backward()
    if device.type == "cuda": torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
    fuse_rms_norms(model, fused=False)
    return logps.detach().float() * completion_mask, grads, seconds, peak

scored(shared_path); scored(trl_path); scored(trl_path, fused_norms=True)   # warm-up: kernels chosen, images cached
runs = {name: [scored(path, fused) for _ in range(2)]
        for name, path, fused in (("TRL", trl_path, False), ("shared", shared_path, False), ("fused norms", trl_path, True))}
print(f"{args.arch}, {B} rows ({args.prompts} prompts x K={args.K}), prompts of {int(prompts['attention_mask'].sum(1).min())}-"
      f"{int(prompts['attention_mask'].sum(1).max())} tokens, completions of {int(lengths.min())}-{L}, {dtype} on "
      f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, gradient checkpointing, LoRA r = "
      f"{lora_config().r}")
for name, rs in runs.items():
    print(f"{name:>11}: forward + backward {', '.join(f'{r[2]:.2f}' for r in rs)} s, peak {rs[0][3]:.1f} GiB")
(trl, trl_grads, *_), (trl2, trl2_grads, *_) = runs["TRL"]
(ours, our_grads, *_), _ = runs["shared"]
(fused, fused_grads, *_), _ = runs["fused norms"]
def grad_diff(a, c): return max(((a[n] - c[n]).norm() / (c[n].norm() + 1e-12)).item() for n in c)
print(f"log p, TRL vs TRL again (the spread of the kernels): max {(trl - trl2).abs().max().item():.3e}; "
      f"LoRA gradients' largest relative difference {grad_diff(trl2_grads, trl_grads):.3e}")
print(f"log p, shared vs TRL: max {(ours - trl).abs().max().item():.3e}, mean over tokens "
      f"{((ours - trl).abs().sum() / completion_mask.sum()).item():.3e}; LoRA gradients' largest relative difference "
      f"{grad_diff(our_grads, trl_grads):.3e}")
print(f"log p, fused norms vs TRL: max {(fused - trl).abs().max().item():.3e}, mean over tokens "
      f"{((fused - trl).abs().sum() / completion_mask.sum()).item():.3e}; LoRA gradients' largest relative difference "
      f"{grad_diff(fused_grads, trl_grads):.3e}")
