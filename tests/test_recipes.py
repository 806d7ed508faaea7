"""The training recipes in configs/train/ (TRL's `--config recipe.yaml`): each builds a run, holds the settings it
names exactly as the one definition in the code has them, and lets command-line flags override it."""
from pathlib import Path

import pytest
import yaml

from consistency_amp.core import NOISE_LEVELS, PAPER_JOINT_STEPS, PAPER_MODELS, PAPER_SETTINGS
from consistency_amp.grid.manifest import SCALE_SETTINGS
from consistency_amp.training.train import TrainParams
from consistency_amp.training.train_cli import parse_args

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "configs" / "train").glob("*.yaml"))


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "configs" / "train" / f"{name}.yaml").read_text())


def test_the_recipes():
    assert [p.stem for p in RECIPES] == ["mini", "paper", "paper_joint", "paper_label_noise", "paper_vllm"]


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_each_recipe_builds_a_run(path):
    params = parse_args(["--config", str(path)])
    assert isinstance(params, TrainParams)
    # a run setting is a TrainParams field; any other GRPOConfig field (use_vllm, ...) lands in trainer_args
    assert all((getattr(params, k) if hasattr(params, k) else params.trainer_args[k]) == v
               for k, v in yaml.safe_load(path.read_text()).items())


@pytest.mark.parametrize("name", ["paper", "paper_joint", "paper_label_noise", "paper_vllm"])
def test_paper_recipes_hold_the_papers_settings(name):
    recipe = load(name)
    assert {k: recipe[k] for k in PAPER_SETTINGS if k != "steps"} == {k: v for k, v in PAPER_SETTINGS.items() if k != "steps"}
    assert recipe["model"] == PAPER_MODELS["7B"] and recipe["scale"] == "paper"
    assert recipe["steps"] == (PAPER_SETTINGS["steps"] if name in ("paper", "paper_vllm") else PAPER_JOINT_STEPS)
    if name == "paper_label_noise": assert recipe["reward"] == "accuracy" and recipe["label_noise"] in NOISE_LEVELS
    if name == "paper_vllm":   # paper.yaml plus TRL's vLLM generation, nothing else
        paper = {k: v for k, v in load("paper").items() if k != "merge_lora_for_generation"}   # vLLM merges itself
        assert {k: v for k, v in recipe.items() if not k.startswith(("use_vllm", "vllm_"))} == paper
        assert recipe["use_vllm"] is True and recipe["vllm_mode"] == "colocate"
    else: assert recipe["merge_lora_for_generation"] is True   # the fast sampling path on a GPU (benchmarks/README.md)


def test_mini_recipe_is_the_registrys_mini_scale():
    recipe, mini = load("mini"), SCALE_SETTINGS["mini"]
    assert {k: recipe[k] for k in recipe if k in mini} == {k: mini[k] for k in recipe if k in mini}
    assert len([k for k in recipe if k in mini]) >= 8


def test_flags_override_the_recipe():
    params = parse_args(["--config", str(REPO / "configs/train/paper.yaml"), "--task", "size", "--steps", "7", "-K", "4"])
    assert (params.task, params.steps, params.num_generations, params.pairs_per_device) == ("size", 7, 4, 4)


def test_bad_recipes_are_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: depth\nstepz: 3\n")
    with pytest.raises(ValueError, match=r"bad.yaml.*\['stepz'\] are fields of neither TrainParams, OTGRPOConfig nor trl.ModelConfig"):
        parse_args(["--config", str(bad)])
    with pytest.raises(ValueError, match="no such file"):
        parse_args(["--config", str(tmp_path / "missing.yaml")])


def test_the_pairs_paper_recipe_holds_the_papers_settings():
    "configs/pairs/paper.yaml, in OTGRPOConfig's names (train_params.SET_BY_PARAMS), is configs/train/paper.yaml's settings."
    from consistency_amp.training.train_params import SET_BY_PARAMS
    from consistency_amp.training.train_pairs import pairs_parser
    recipe = yaml.safe_load((REPO / "configs" / "pairs" / "paper.yaml").read_text())
    spatial = load("paper")
    as_params = {SET_BY_PARAMS[k]: v for k, v in recipe.items() if k in SET_BY_PARAMS}
    assert as_params == {k: v for k, v in spatial.items() if k in as_params} and len(as_params) == len(PAPER_SETTINGS) + 1
    assert {k: v for k, v in recipe.items() if k not in SET_BY_PARAMS} == {"merge_lora_for_generation": True}
    _, config, model_args = pairs_parser().parse_args_and_config(["--config", str(REPO / "configs/pairs/paper.yaml"), "--output_dir", "x"])
    assert (config.max_steps, config.num_generations, config.pairs_per_device, model_args.model_name_or_path) == (500, 8, 4, PAPER_MODELS["7B"])


def test_the_pairs_vllm_recipe_is_the_pairs_paper_recipe_with_the_spatial_vllm_engine():
    "configs/pairs/paper_vllm.yaml: configs/pairs/paper.yaml (less the merged sampling, which vLLM does itself) plus configs/train/paper_vllm.yaml's vLLM settings, and the pairs command reads it."
    from consistency_amp.training.train_pairs import pairs_parser
    pairs = lambda name: yaml.safe_load((REPO / "configs" / "pairs" / f"{name}.yaml").read_text())
    recipe, engine = pairs("paper_vllm"), {k: v for k, v in load("paper_vllm").items() if k.startswith(("use_vllm", "vllm_"))}
    assert recipe == {k: v for k, v in pairs("paper").items() if k != "merge_lora_for_generation"} | engine
    _, config, _ = pairs_parser().parse_args_and_config(["--config", str(REPO / "configs/pairs/paper_vllm.yaml"), "--output_dir", "x"])
    assert (config.use_vllm, config.vllm_mode, config.vllm_enable_sleep_mode, config.merge_lora_for_generation) == (True, "colocate", True, False)
