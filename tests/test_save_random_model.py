"""benchmarks/save_random_model.py (what vllm_device_check.sh hands vLLM): the folder it writes is a model the
evaluation loads by name, with the tiny processor; it never writes over an existing folder."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "save_random_model.py"


def test_saved_model_is_evaluated_and_never_overwritten(tmp_path):
    env = dict(os.environ, CONSISTENCY_AMP_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    folder = tmp_path / "random-tiny"
    made = subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny", "--out", str(folder), "--device", "cpu"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen2_5_vl"
    again = subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny", "--out", str(folder), "--device", "cpu"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "--out" in again.stderr and "exists" in again.stderr
    evaluated = subprocess.run([sys.executable, "-m", "consistency_amp.evaluation.evaluate", "--model", str(folder),
                                "--tasks", "depth", "--sources", "SUNRGBD", "--max_examples", "2",
                                "--consistency_samples", "0", "--runs_dir", str(tmp_path / "runs")],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    results = json.loads((tmp_path / "runs" / "external-random-tiny" / "eval" / "test-first2.json").read_text())
    assert results, "the evaluation wrote no results"


def test_saved_adapter_loads_and_changes_the_answers(tmp_path):
    "The random adapter is the project's LoRA (r, targets) as a run saves it, and it moves the model's logits."
    env = dict(os.environ, CONSISTENCY_AMP_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    folder, adapter = tmp_path / "random-tiny", tmp_path / "random-tiny-lora"
    made = subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny", "--out", str(folder), "--device", "cpu",
                           "--adapter-out", str(adapter)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    import torch
    from consistency_amp.training.models import LORA_R, load_model
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == LORA_R and (adapter / "adapter_model.safetensors").is_file()
    base, processor = load_model(str(folder), lora=False, device="cpu")
    tuned, _ = load_model(str(folder), adapter=str(adapter), device="cpu")
    inputs = processor(text=["Is the chair closer than the table?"], return_tensors="pt")
    with torch.no_grad():
        assert (base(**inputs).logits - tuned(**inputs).logits).abs().max() > 1e-3


def test_initializer_range_and_adapter_std(tmp_path, monkeypatch):
    "The scales vllm_cpu_check.py asks for: weights of std `initializer_range`, lora_B of std `std`."
    import importlib.util
    import torch
    from safetensors.torch import load_file
    monkeypatch.setenv("CONSISTENCY_AMP_CACHE", str(tmp_path / "cache"))
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("save_random_model", SCRIPT)
        module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
        folder = module.save_random_model("tiny-vllm-cpu", tmp_path / "model", initializer_range=0.3)
        adapter = module.save_random_adapter(folder, tmp_path / "lora", std=0.3)
        again = module.save_random_model("tiny-vllm-cpu", tmp_path / "again", initializer_range=0.3)
        other = module.save_random_model("tiny-vllm-cpu", tmp_path / "other", initializer_range=0.3, seed=1)
    finally: sys.path.remove(str(SCRIPT.parent))
    weights = load_file(folder / "model.safetensors")
    drawn = lambda f: next(w for n, w in load_file(f / "model.safetensors").items() if n.endswith("layers.0.self_attn.q_proj.weight"))
    assert torch.equal(drawn(folder), drawn(again)) and not torch.equal(drawn(folder), drawn(other))   # seeded draws
    q = next(w for name, w in weights.items() if name.endswith("layers.0.self_attn.q_proj.weight"))
    assert 0.25 < q.std().item() < 0.35, q.std()
    config = json.loads((folder / "config.json").read_text())
    assert config["text_config"]["num_attention_heads"] == 2
    lora = load_file(adapter / "adapter_model.safetensors")
    b = torch.cat([w.flatten() for name, w in lora.items() if "lora_B" in name])
    assert 0.25 < b.std().item() < 0.35, b.std()
