"""Issue 23's "LoRA dtype" lead, on the CPU: where do peft's LoRA layers cast their input to the adapter's float32 in a
training step with bf16=True, and is that cast needed where accelerate's autocast runs the forward?

1. One training step of the tiny model in bfloat16 with bf16=True (accelerate's CPU autocast), counting the casts
   peft makes (`BaseTunerLayer._cast_input_dtype`) with and without autocast on at the time.
2. Under autocast, the tiny model's logits and gradients with peft's casts and without them
   (`peft.helpers.disable_input_dtype_casting`), LoRA dropout 0 and 0.05, from one seed.

    OMP_NUM_THREADS=2 python research/lora_cast_probe.py
"""
import tempfile
from collections import Counter
from pathlib import Path

import torch
import transformers
from peft.helpers import disable_input_dtype_casting
from peft.tuners.tuners_utils import BaseTunerLayer

from consistency_amp.training.models import load_model
from consistency_amp.training.trainer import OTGRPOConfig, OTGRPOTrainer
from consistency_amp.world.synthetic import make_synthetic_world
from consistency_amp.world.task_splits import build_examples, load_sources


def casts_in_a_step() -> Counter:
    root = make_synthetic_world(Path(tempfile.mkdtemp()) / "world", n_images_per_split={"train": 8},
                                sources=("SUNRGBD",), indoor_size=(320, 240))
    scenes = load_sources(root, sources=("SUNRGBD",))["SUNRGBD"]
    examples = [e for task in ("orientation", "depth") for e in build_examples(scenes, task)]
    seen, cast = Counter(), BaseTunerLayer._cast_input_dtype
    def counted(self, x, dtype):
        if x is not None and x.dtype != dtype and getattr(self, "cast_input_dtype_enabled", True):
            seen["under autocast" if torch.is_autocast_enabled(x.device.type) else "without autocast"] += 1
        return cast(self, x, dtype)
    BaseTunerLayer._cast_input_dtype = counted
    try:
        transformers.set_seed(0)
        model, processor = load_model(dtype=torch.bfloat16, lora_dropout=0.0)
        config = OTGRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=True, report_to=[], save_strategy="no",
                              num_generations=4, pairs_per_device=2, max_completion_length=8, max_steps=1,
                              learning_rate=1e-2, logging_steps=1)
        OTGRPOTrainer(model, config, examples, processing_class=processor).train()
    finally:
        BaseTunerLayer._cast_input_dtype = cast
    return seen


def with_and_without_casts(lora_dropout: float) -> str:
    transformers.set_seed(0)
    model, processor = load_model(dtype=torch.bfloat16, lora_dropout=lora_dropout)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name: p.normal_(0, 0.02)   # made zero: a moved adapter, so that its path matters
    model.train()
    inputs = processor(text=["Is the chair closer to the camera than the table? " * 8] * 4, return_tensors="pt")
    runs = {}
    for casting in (True, False):
        torch.manual_seed(1)
        with torch.autocast("cpu", dtype=torch.bfloat16), disable_input_dtype_casting(model, active=not casting):
            logits = model(**inputs).logits
            logits.float().logsumexp(-1).mean().backward()
        runs[casting] = logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
    (a, grads_a), (b, grads_b) = runs[True], runs[False]
    return (f"LoRA dropout {lora_dropout}: logits bitwise equal {torch.equal(a, b)} (max diff "
            f"{(a.float() - b.float()).abs().max():.2e}); gradients bitwise equal "
            f"{all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)} (max diff "
            f"{max((grads_a[n] - grads_b[n]).abs().max().item() for n in grads_a):.2e})")


if __name__ == "__main__":
    print("casts to float32 in one training step (bf16=True, tiny model in bfloat16):", dict(casts_in_a_step()))
    for p in (0.0, 0.05): print(with_and_without_casts(p))
