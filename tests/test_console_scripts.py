"""The console scripts of pyproject.toml point at the command lines' entry functions, and each command answers --help
with every field of its arguments (the same commands run as `python -m ...`)."""
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_the_five_commands_are_declared():
    assert sorted(SCRIPTS) == ["consistency-amp-evaluate", "consistency-amp-evaluate-pairs", "consistency-amp-registry", "consistency-amp-train",
                               "consistency-amp-train-pairs"]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_script_names_an_entry_function(name):
    module, function = SCRIPTS[name].split(":")
    assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.parametrize("module, fields_of", [
    ("consistency_amp.evaluation.evaluate", "consistency_amp.evaluation.evaluate:EvalArguments"),
    ("consistency_amp.training.train", "consistency_amp.training.train:TrainParams"),
    ("consistency_amp.training.train_pairs", "trl:ScriptArguments"),
    ("consistency_amp.training.train_pairs", "trl:ModelConfig"),
    ("consistency_amp.evaluation.pair_evaluation", "consistency_amp.evaluation.pair_evaluation:PairEvalArguments"),
])
def test_help_lists_every_field(module, fields_of):
    from dataclasses import fields
    where, name = fields_of.split(":")
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert all(f"--{f.name}" in done.stdout for f in fields(getattr(importlib.import_module(where), name)))


def test_extras_for_tracking_deepspeed_and_vllm():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"tracking", "deepspeed", "vllm"} <= set(extras)
    assert any(d.startswith("deepspeed") for d in extras["deepspeed"]) and any(d.startswith("vllm") for d in extras["vllm"])
    assert {"tensorboard", "wandb"} <= {d.split(">")[0].split("=")[0] for d in extras["tracking"]}


def test_every_imported_package_is_declared():
    "What the package imports (outside the standard library and itself) is a declared dependency, and the reverse."
    import re
    imported = set()
    for path in (REPO / "consistency_amp").rglob("*.py"):
        imported |= set(re.findall(r"^\s*(?:import|from) ([A-Za-z_]\w*)", path.read_text(), re.M))
    imported -= set(sys.stdlib_module_names) | {"consistency_amp", "__future__"}
    names = {"PIL": "pillow", "ot": "pot", "yaml": "pyyaml"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    name = lambda d: re.split(r"[<>=!~ \[]", d)[0].lower()
    declared = {name(d) for d in project["dependencies"]}
    optional = {name(d) for deps in project["optional-dependencies"].values() for d in deps}   # imported only where used (vllm)
    assert {names.get(m, m).lower() for m in imported} <= declared | optional, sorted({names.get(m, m).lower() for m in imported} - declared - optional)
    # papermill and ipykernel run the notebooks; safetensors is the adapter format peft writes (and the tests read)
    unused = declared - {names.get(m, m).lower() for m in imported} - {"papermill", "ipykernel", "safetensors"}
    assert not unused, unused
