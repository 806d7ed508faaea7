"""consistency_amp.training.models outside the notebook: a fresh interpreter loads the default (tiny) model, bad input fails
with the offending name, and TRL's GRPOTrainer trains the tiny model's LoRA without touching its vision tower."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    "A private model cache: the tests neither write into the repository nor depend on its `.cache/`."
    path = tmp_path_factory.mktemp("model-cache")
    old = os.environ.get("CONSISTENCY_AMP_CACHE")
    os.environ["CONSISTENCY_AMP_CACHE"] = str(path)
    yield path
    if old is None: os.environ.pop("CONSISTENCY_AMP_CACHE")
    else: os.environ["CONSISTENCY_AMP_CACHE"] = old


SCRIPT = """
import json, numpy as np, torch
from PIL import Image
from consistency_amp.training.models import TINY_MODEL, load_model, count_parameters, lora_module_names
from consistency_amp.reward.verifiers import SYSTEM_PROMPT
model, processor = load_model(TINY_MODEL)
image = Image.fromarray(np.full((64, 96, 3), 127, dtype=np.uint8))
messages = [{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Is object 1 bigger than object 2?"}]}]
inputs = processor.apply_chat_template([messages], add_generation_prompt=True, tokenize=True, return_dict=True,
                                       return_tensors="pt")
with torch.no_grad():
    out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
print(json.dumps({"base": type(model.get_base_model()).__name__, "processor": type(processor).__name__,
                  "new_tokens": out.shape[1] - inputs["input_ids"].shape[1], "counts": count_parameters(model),
                  "lora": lora_module_names(model), "grid": inputs["image_grid_thw"].tolist(),
                  "image_tokens": int((inputs["input_ids"] == processor.image_token_id).sum())}))
"""


def test_tiny_model_builds_and_loads_in_fresh_process(cache):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=cache, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["base"] == "Qwen2_5_VLForConditionalGeneration"
    assert got["processor"] == "Qwen2_5_VLImageOnlyProcessor"
    assert 1 <= got["new_tokens"] <= 3
    (t, h, w), = got["grid"]
    assert got["image_tokens"] == t * h * w // 4
    counts = got["counts"]
    assert counts["vision_trainable"] == 0 and counts["lora_trainable"] > 0 and counts["trainable"] == counts["lora_trainable"]
    assert len(got["lora"]) == 14 and all(".language_model.layers." in n for n in got["lora"])
    assert not any(".visual." in n for n in got["lora"])
    assert any(p.name.startswith("tiny-qwen2.5-vl-") for p in cache.iterdir())  # built into the cache it was given


def test_missing_local_path_names_it(cache):
    from consistency_amp.training.models import load_model
    with pytest.raises(ValueError, match="/no/such/dir/model"):
        load_model("/no/such/dir/model")
    with pytest.raises(ValueError, match="does_not_exist"):
        load_model(Path("does_not_exist"))


def test_directory_without_config_names_it(cache, tmp_path):
    from consistency_amp.training.models import load_model
    with pytest.raises(ValueError, match="no config.json"):
        load_model(tmp_path)


@pytest.mark.parametrize("r", [0, -4, 1.5, True])
def test_bad_lora_rank(cache, r):
    from consistency_amp.training.models import load_model
    with pytest.raises(ValueError, match="lora_r"):
        load_model(lora_r=r)


@pytest.mark.parametrize("kwargs, name", [(dict(lora_alpha=0), "lora_alpha"), (dict(lora_dropout=-0.1), "lora_dropout"),
                                          (dict(dtype="float13"), "dtype")])
def test_bad_parameters_are_named(cache, kwargs, name):
    from consistency_amp.training.models import load_model
    with pytest.raises(ValueError, match=name):
        load_model(**kwargs)


def test_missing_adapter_names_it(cache):
    from consistency_amp.training.models import load_model
    with pytest.raises(ValueError, match="/no/such/adapter"):
        load_model(adapter="/no/such/adapter")


def _grpo_dataset():
    from datasets import Dataset
    from PIL import Image
    from consistency_amp.reward.verifiers import SYSTEM_PROMPT
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (80 + 16 * i, 112, 3), dtype=np.uint8)) for i in range(4)]
    prompts = [[{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Is object 1 closer to the camera than object {i + 2}?"}]}]
               for i in range(4)]
    return Dataset.from_dict({"prompt": prompts, "image": images})


@pytest.mark.parametrize("route", ["peft_config", "wrapped"])
def test_grpo_trains_only_language_lora(cache, tmp_path, route):
    "TRL 1.16's GRPOTrainer accepts the tiny model and its processor; one step moves LoRA weights only."
    from trl import GRPOConfig, GRPOTrainer
    from consistency_amp.training.models import TINY_MODEL, count_parameters, load_model, lora_config
    def reward(completions, **kwargs): return [float(len(c[0]["content"]) % 3) for c in completions]
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=6, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                      learning_rate=1e-2, seed=0)
    if route == "peft_config":  # what the trainer does: plain model + peft_config, processor from AutoProcessor
        model, _ = load_model(TINY_MODEL, lora=False)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=_grpo_dataset(),
                              peft_config=lora_config())
    else:  # the LoRA-wrapped model and its processor from load_model
        model, processor = load_model(TINY_MODEL)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=_grpo_dataset(),
                              processing_class=processor)
    assert type(trainer.processing_class).__name__ == "Qwen2_5_VLImageOnlyProcessor" and trainer._is_vlm
    assert trainer._image_pad_token_id == trainer.processing_class.image_token_id
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed and all("lora_" in n and ".language_model." in n for n in changed), changed
    counts = count_parameters(trainer.model)
    assert counts["vision_trainable"] == 0 and counts["trainable"] == counts["lora_trainable"] > 0
