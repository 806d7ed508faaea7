"""The image-feature cache's exactness on a GPU in bf16 (issue 23): per-token log-probabilities of one batch of prompt
rows (each image repeated K times, as in a GRPO step) with the cache and without, against the run-to-run spread of
the uncached forward itself. Random weights of the released architecture (as bench_step_time.py); on a machine
without CUDA it runs in float32 on the CPU (`--arch tiny` for a quick check). Results: benchmarks/README.md."""
import argparse, sys
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step_time as b
from consistency_amp.training.image_features import install_image_cache
from consistency_amp.training.models import TINY_MODEL, load_processor
from consistency_amp.training.train import TrainParams, train_examples
from consistency_amp.world.prompts import make_prompt_pair
import numpy as np

ap = argparse.ArgumentParser(); ap.add_argument("--arch", default="7B"); ap.add_argument("--K", type=int, default=4)
ap.add_argument("--images", type=int, default=4); args = ap.parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu"); dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
processor = load_processor(TINY_MODEL); processor.image_processor.size = dict(b.RELEASED_PIXELS)
torch.manual_seed(0)
model = b.build_model(b.model_config(args.arch, processor.tokenizer), device, dtype).eval()
examples = train_examples(TrainParams(task="depth", source="SUNRGBD"))
rows = [r for i, e in enumerate(examples[:args.images])
        for r in make_prompt_pair(e, np.random.default_rng(i)).to_rows(include_labels=True)[:1]]
texts = [processor.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) + "The answer is"
         for r in rows for _ in range(args.K)]
images = [[r["image"]] for r in rows for _ in range(args.K)]
processor.tokenizer.padding_side = "left"
inputs = processor(text=texts, images=images, return_tensors="pt", padding=True).to(device)
def logps():
    with torch.no_grad():
        logits = model(**inputs).logits[:, -8:].float()
    return torch.log_softmax(logits, -1)
cache = install_image_cache(model)
cache.enabled = False; a = logps(); a2 = logps()
cache.enabled = True; c = logps()
print(f"{args.arch}, {len(texts)} rows ({args.images} images x K={args.K}), {inputs['input_ids'].shape[1]} tokens, bf16 on "
      f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'} ({dtype}): cache stats {cache.stats}")
print(f"max |log p| difference, uncached vs uncached again: {(a - a2).abs().max().item():.3e}")
print(f"max |log p| difference, cached vs uncached: {(c - a).abs().max().item():.3e}; mean {(c - a).abs().mean().item():.3e}; "
      f"argmax agreement {(c.argmax(-1) == a.argmax(-1)).float().mean().item():.4f}")
