"""OT-GRPO on your own paired data (issue 25): in a fresh interpreter, `from consistency_amp import OTGRPOTrainer,
OTGRPOConfig` trains 2 steps on a CPU on a hand-made `datasets.Dataset` of prompt pairs, text-only and with images,
with the tiny VLM, and text-only with the tiny causal LM (no vision tower), and writes an adapter. What the runs learn is not asserted: two steps show the path works."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import json, sys, tempfile
from pathlib import Path
from consistency_amp import OTGRPOTrainer, OTGRPOConfig
from consistency_amp.training.models import load_model
from datasets import Dataset
from PIL import Image

kind, out = sys.argv[1], Path(sys.argv[2])
rows = []
for a, b in [(7, 3), (2, 9), (5, 4), (1, 8)]:
    row = dict(prompt=[{"role": "user", "content": f"Is {a} larger than {b}?"}],
               prompt_augmented=[{"role": "user", "content": f"Is {b} larger than {a}?"}],   # the order swapped: opposite
               relation="opposite", answer_type="boolean")
    if kind in ("image", "image-text-model"):
        image = Image.new("RGB", (64, 48), (a * 30, 0, b * 30))
        row.update(image=image, image_augmented=image.transpose(Image.FLIP_LEFT_RIGHT))
    rows.append(row)
dataset = Dataset.from_list(rows)
if kind in ("text-model", "image-text-model"):       # a causal LM without a vision tower: the tiny offline Qwen2
    from consistency_amp.training.text_models import load_text_model
    model, processor = load_text_model()
else: model, processor = load_model()                 # the tiny offline Qwen2.5-VL, LoRA on its language model
args = OTGRPOConfig(output_dir=str(out / "trainer"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                    num_generations=2, pairs_per_device=2, max_completion_length=8, max_steps=2,
                    gradient_checkpointing=False, logging_steps=1)
trainer = OTGRPOTrainer(model, args, dataset, processing_class=processor)
trainer.train()
trainer.save_model(str(out / "adapter"))
print(json.dumps(dict(step=trainer.state.global_step, files=sorted(p.name for p in (out / "adapter").iterdir()),
                      logged=[k for k in trainer.state.log_history[0] if k.startswith("rewards/")])))
'''


@pytest.mark.parametrize("kind", ["text", "image", "text-model"])
def test_a_hand_made_paired_dataset_trains_and_saves_an_adapter(kind, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="",
               CONSISTENCY_AMP_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, kind, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["step"] == 2
    assert "adapter_model.safetensors" in got["files"] and "adapter_config.json" in got["files"]
    assert {"rewards/format/mean", "rewards/consistency/mean"} <= set(got["logged"])


def test_image_pairs_with_a_text_model_are_refused_before_training(tmp_path):
    "Its tokenizer reads no images: one error naming the columns at the trainer's construction, not TRL's KeyError mid-step."
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="",
               CONSISTENCY_AMP_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "image-text-model", str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode != 0
    assert "the paired dataset has images (columns image, image_augmented), but the model's" in proc.stderr, proc.stderr[-3000:]
    trace = proc.stderr.split("Traceback")[-1]
    assert "training/trainer.py" in trace and "in __init__" in trace and "train()" not in trace, trace   # the constructor
