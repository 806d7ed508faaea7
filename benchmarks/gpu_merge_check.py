"""Sampling from merged LoRA weights (`OTGRPOConfig.merge_lora_for_generation`) on a GPU in bf16 (issue 23): the
next-token log-probabilities of prompt rows with the model's LoRA layers and with the adapter merged into a copy of
the weights (`merged_lora_weights`); for scale, the adapter's effect (the base model) and, in bf16, both paths against
the same model and adapter in float32 (the reference: each bf16 path's own rounding error). The LoRA forward of the
same rows in reverse batch order is printed too (0 on the H200: the kernels do not depend on the order). Random
weights of the released architecture with a random adapter (`lora_B` ~ N(0, --b-std); peft makes it zero), eval mode
(no dropout). On a machine without CUDA it runs in float32 on the CPU (`--arch tiny` for a quick check). Results:
benchmarks/README.md."""
import argparse, sys
from pathlib import Path
import numpy as np
import torch
from peft import get_peft_model
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step_time as b
from consistency_amp.training.models import TINY_MODEL, freeze_vision_tower, load_processor, lora_config
from consistency_amp.training.train import TrainParams, train_examples
from consistency_amp.training.generation import merged_lora_weights
from consistency_amp.world.prompts import make_prompt_pair

ap = argparse.ArgumentParser(); ap.add_argument("--arch", default="7B"); ap.add_argument("--rows", type=int, default=16)
ap.add_argument("--b-std", type=float, default=0.02); args = ap.parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
processor = load_processor(TINY_MODEL); processor.image_processor.size = dict(b.RELEASED_PIXELS)
torch.manual_seed(0)
model = b.build_model(b.model_config(args.arch, processor.tokenizer), device, dtype)
freeze_vision_tower(model)
model = get_peft_model(model, lora_config()).eval()
with torch.no_grad():
    for n, p in model.named_parameters():
        if "lora_B" in n: p.normal_(0, args.b_std)
examples = train_examples(TrainParams(task="depth", source="SUNRGBD"))
rows = [r for i, e in enumerate(examples[:args.rows])
        for r in make_prompt_pair(e, np.random.default_rng(i)).to_rows(include_labels=True)[:1]]
texts = [processor.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) + "<think> The" for r in rows]
processor.tokenizer.padding_side = "left"
def logps(order):
    inputs = processor(text=[texts[i] for i in order], images=[[rows[i]["image"]] for i in order], return_tensors="pt",
                       padding=True).to(device)
    with torch.no_grad():
        out = torch.log_softmax(model(**inputs).logits[:, -4:].float(), -1)
    return out[torch.argsort(torch.tensor(order))]
forward, backward = list(range(len(rows))), list(reversed(range(len(rows))))
lora, lora_reversed = logps(forward), logps(backward)
with merged_lora_weights(model): merged = logps(forward)
with model.disable_adapter(): base = logps(forward)
def diff(a, c):
    d = (a - c).abs()
    return (f"max {d.max().item():.3e}, mean {d.mean().item():.3e}, argmax agreement "
            f"{(a.argmax(-1) == c.argmax(-1)).float().mean().item():.4f}")
name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
print(f"{args.arch}, {len(rows)} rows, last 4 positions, {dtype} on {name}; lora_B ~ N(0, {args.b_std})")
print(f"|log p| merged vs LoRA layers: {diff(merged, lora)}")
print(f"|log p| LoRA layers vs the same rows in reverse batch order: {diff(lora_reversed, lora)}")
print(f"|log p| base model vs LoRA layers (the adapter's effect): {diff(base, lora)}")
if dtype != torch.float32:   # the reference: the same model and adapter in float32, LoRA layers (merging is exact there)
    model.float(); exact = logps(forward)
    print(f"|log p| against float32: merged {diff(merged, exact)}; LoRA layers {diff(lora, exact)}")
