"""consistency_amp.training.trainer outside the notebook: bad input names the parameter, and the trainer's reward path is
checked with scripted completions for every pairing strategy, for the corrupted accuracy reward, for numeric tasks
and for the sampler's repeats (steps_per_generation, num_iterations)."""
import copy
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from consistency_amp.world.spatial_pairs import spatial_pair_dataset
from consistency_amp.reward.pairing import check_pair_layout, paired_consistency_rewards
from consistency_amp.training.paired_sampler import PairedRepeatSampler, pair_key, split_key
from consistency_amp.training.trainer import OTGRPOConfig, OTGRPOTrainer, PairedPromptDataset
from consistency_amp.world.transforms import phi
from consistency_amp.reward.verifiers import accuracy, parse_answer

T_, F_, BAD = "<think>t</think><answer>True</answer>", "<think>f</think><answer>False</answer>", "<answer>True"


def cpu(**kwargs):
    base = dict(output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                num_generations=2, pairs_per_device=2, max_completion_length=8, gradient_checkpointing=False)
    return OTGRPOConfig(**{**base, **kwargs})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from consistency_amp.world.synthetic import make_synthetic_world
    from consistency_amp.world.task_splits import load_sources
    root = make_synthetic_world(tmp_path_factory.mktemp("world") / "world", n_images_per_split={"train": 8},
                                sources=("SUNRGBD",), indoor_size=(320, 240))
    return load_sources(root, sources=("SUNRGBD",))["SUNRGBD"]


@pytest.fixture(scope="module")
def examples(world):
    from consistency_amp.world.task_splits import build_examples
    return [e for task in ("orientation", "depth") for e in build_examples(world, task)]


@pytest.fixture(scope="module")
def model_and_processor(tmp_path_factory):
    import os
    from consistency_amp.training.models import load_model
    old = os.environ.get("CONSISTENCY_AMP_CACHE")
    os.environ["CONSISTENCY_AMP_CACHE"] = str(tmp_path_factory.mktemp("model-cache"))
    try: yield load_model()
    finally:
        if old is None: os.environ.pop("CONSISTENCY_AMP_CACHE")
        else: os.environ["CONSISTENCY_AMP_CACHE"] = old


def scripted(trainer, texts):
    tokenizer = trainer.processing_class.tokenizer
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        assert len(prompt_ids) == len(texts)
        return [tokenizer(t, add_special_tokens=False).input_ids + [eos] for t in texts], None
    trainer._generate_single_turn = generate


def score(trainer, texts):
    "One generation batch through TRL's reward and advantage code with scripted completions."
    rows = next(iter(trainer.get_train_dataloader()))
    scripted(trainer, texts)
    trainer.model.train()
    out = trainer._generate_and_score_completions(copy.deepcopy(rows))
    columns = {name: torch.tensor(list(trainer._logs["rewards"][name])) for name in trainer.reward_func_names}
    return rows, out, columns


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, message", [
    (dict(reward="label"), "reward must be one of 'consistency', 'accuracy'"),
    (dict(pairing="hungarian"), "pairing must be one of 'minimal', 'random', 'one_to_all'"),
    (dict(label_noise=-0.1, reward="accuracy"), "label_noise must be a probability in [0, 1]"),
    (dict(label_noise=True, reward="accuracy"), "label_noise must be a probability"),
    (dict(label_noise=0.1), "reads no label"),
    (dict(num_generations=1), "num_generations (the group size K) must be an integer >= 2"),
    (dict(pairs_per_device=0), "pairs_per_device must be an integer >= 1 or None"),
    (dict(pairs_per_device=None, per_device_train_batch_size=None), "per_device_train_batch_size (with pairs_per_device=None) must be an integer >= 1"),
    (dict(per_device_train_batch_size=5), "contradicts pairs_per_device=2"),
    (dict(reward_weights=[1.0]), "at least 2 weights"),
    (dict(remove_unused_columns=True), "remove_unused_columns must be False"),
])
def test_config_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=None) as e: cpu(**kwargs)
    assert message in str(e.value)


def test_config_pairs_and_steps_per_generation():
    args = cpu(num_generations=4, pairs_per_device=3, steps_per_generation=2)
    assert (args.per_device_train_batch_size, args.generation_batch_size) == (24, 48)
    one_group = cpu(pairs_per_device=None, per_device_train_batch_size=2, steps_per_generation=2)   # 1 group per step
    assert (one_group.per_device_train_batch_size, one_group.generation_batch_size) == (2, 4)


def test_keys_and_sampler_bad_input():
    with pytest.raises(ValueError, match="no key for index=3, side=2"): pair_key(3, 2, 0, 5)
    with pytest.raises(ValueError, match="non-negative integer"): split_key("7", 5)
    with pytest.raises(ValueError, match="pairs_per_batch must be an integer >= 1"): PairedRepeatSampler(5, 2, 0)
    with pytest.raises(ValueError, match=r"completions 0\.\.3 are not the x group"):
        check_pair_layout(["a", "a", "b", "b"], ["original", "original", "augmented", "augmented"], 2)
    with pytest.raises(ValueError, match=r"completions 0\.\.3 are not the x group"):
        check_pair_layout(["a"] * 4, ["original", "augmented", "original", "augmented"], 2)
    with pytest.raises(ValueError, match="not a whole number of pairs of 2 x K=2"):
        check_pair_layout(["a"] * 3, ["original"] * 3, 2)


def test_dataset_bad_input(examples, world):
    from datasets import Dataset
    from consistency_amp.world.task_splits import build_examples
    with pytest.raises(ValueError, match="at least one example"): spatial_pair_dataset([])
    with pytest.raises(ValueError, match=r"examples\[1\] is a dict"): spatial_pair_dataset([examples[0], {}])
    with pytest.raises(ValueError, match="got list"): PairedPromptDataset(examples)
    with pytest.raises(ValueError, match="no rows"): PairedPromptDataset(Dataset.from_dict({"prompt": []}))
    with pytest.raises(ValueError, match="reward must be one of"): PairedPromptDataset(spatial_pair_dataset(examples), reward="acc")
    counting = build_examples(world, "counting")
    with pytest.raises(ValueError, match=f"label_noise flips boolean labels; row {len(examples)} has a numeric answer"):
        PairedPromptDataset(spatial_pair_dataset(examples + counting), reward="accuracy", label_noise=0.2)
    unlabelled = Dataset.from_list([dict(prompt="Is 2 > 1?", prompt_augmented="Is 1 > 2?", relation="opposite", answer_type="boolean")] * 2)
    with pytest.raises(ValueError, match="reward='accuracy' needs the labels, columns ground_truth and ground_truth_augmented"):
        PairedPromptDataset(unlabelled, reward="accuracy")                 # no label column at all: at construction
    partly = Dataset.from_list([dict(unlabelled[0], ground_truth=None, ground_truth_augmented=None),
                                dict(unlabelled[0], ground_truth=True, ground_truth_augmented=False)])
    with pytest.raises(ValueError, match="row 0: reward='accuracy' needs its labels, ground_truth and ground_truth_augmented"):
        PairedPromptDataset(partly, reward="accuracy")                     # a stored row without its labels: at construction


def test_trainer_bad_input(examples, model_and_processor):
    from trl import GRPOConfig
    model, processor = model_and_processor
    with pytest.raises(ValueError, match="args must be an OTGRPOConfig, got GRPOConfig"):
        OTGRPOTrainer(model, GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False), examples)
    with pytest.raises(ValueError, match="fewer than the 40 prompt pairs of one generation batch"):
        OTGRPOTrainer(model, cpu(pairs_per_device=40), examples, processing_class=processor)
    with pytest.raises(ValueError, match="train_dataset was built for reward='consistency'"):
        OTGRPOTrainer(model, cpu(reward="accuracy"), PairedPromptDataset(spatial_pair_dataset(examples)), processing_class=processor)


# ---------------------------------------------------------------- the reward path
@pytest.mark.parametrize("strategy", ["minimal", "random", "one_to_all"])
def test_consistency_column_for_each_strategy(examples, model_and_processor, strategy):
    model, processor = model_and_processor
    trainer = OTGRPOTrainer(model, cpu(pairing=strategy), examples, processing_class=processor)
    texts = [T_, F_, F_, F_, BAD, T_, T_, F_]            # 2 pairs of 2 groups of K = 2
    rows, out, columns = score(trainer, texts)
    expected = paired_consistency_rewards(texts, [r["pair_id"] for r in rows], [r["side"] for r in rows],
                                          [r["relation"] for r in rows], [r["answer_type"] for r in rows], 2, strategy)
    assert columns["consistency"].tolist() == expected
    total = (columns["format"] + columns["consistency"]).view(-1, 2)
    advantages = (total - total.mean(1, keepdim=True)) / (total.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(out["advantages"], advantages.flatten())


def test_corrupted_accuracy_reward(examples, model_and_processor):
    model, processor = model_and_processor
    args = cpu(reward="accuracy", label_noise=0.5, label_noise_seed=3, pairs_per_device=4)
    trainer = OTGRPOTrainer(model, args, examples, processing_class=processor)
    texts = [T_, T_, F_, F_] * 4
    rows, out, columns = score(trainer, texts)
    dataset = trainer.train_dataset
    flipped = [bool(dataset.flipped[split_key(r["key"], len(dataset))[0]]) for r in rows]
    assert any(flipped) and not all(flipped)
    for text, row, flip, reward in zip(texts, rows, flipped, columns["accuracy"].tolist()):
        clean = dataset.ground_truth(row["key"])
        assert row["ground_truth"] == ((not clean) if flip else clean)              # x and x' flipped together
        assert reward == accuracy(parse_answer(text, "boolean"), row["ground_truth"], "boolean")
    for pair in range(0, len(rows), 4):                                            # x' label = phi(corrupted x label)
        assert rows[pair + 2]["ground_truth"] == phi(rows[pair]["relation"], rows[pair]["ground_truth"])
    clean_accuracy = np.mean([accuracy(parse_answer(t, "boolean"), dataset.ground_truth(r["key"]), "boolean")
                              for t, r in zip(texts, rows)])
    assert trainer._metrics["train"]["answers/accuracy"][-1] == pytest.approx(clean_accuracy)   # metric: clean labels


def test_numeric_task_pairs(world, model_and_processor):
    from consistency_amp.world.task_splits import build_examples
    model, processor = model_and_processor
    counting = build_examples(world, "counting")
    trainer = OTGRPOTrainer(model, cpu(pairs_per_device=1), counting, processing_class=processor)
    texts = ["<think>n</think><answer>3</answer>", "<think>n</think><answer>4</answer>",
             "<think>n</think><answer>3</answer>", "<think>n</think><answer>6</answer>"]
    rows, out, columns = score(trainer, texts)
    assert {r["relation"] for r in rows} == {"numeric"} and {r["answer_type"] for r in rows} == {"numeric"}
    # minimal pairing matches 3-6 and 4-3: scores 1 - 3/6 = 0.5 and 1 - 1/4 = 0.75 (rescaled absolute error)
    assert columns["consistency"].tolist() == [0.5, 0.75, 0.75, 0.5]


def test_sampler_repeats_follow_trl(examples, model_and_processor):
    model, processor = model_and_processor
    trainer = OTGRPOTrainer(model, cpu(steps_per_generation=2, num_iterations=3), examples, processing_class=processor)
    sampler = trainer._get_train_sampler()
    assert (sampler.repeat_count, sampler.pairs_per_batch) == (6, 4)      # 2 x 3 reuses of 4 pairs (2 per step)
    loader = trainer.get_train_dataloader()
    batches = [next(it) for it in [iter(loader)] for _ in range(6)]
    assert len(batches[0]) == 16 and all([r["key"] for r in b] == [r["key"] for r in batches[0]] for b in batches)
    check_pair_layout([r["pair_id"] for r in batches[0]], [r["side"] for r in batches[0]], 2)


def test_epochs_reshuffle_and_resume_is_deterministic(examples):
    sampler = PairedRepeatSampler(len(examples), 2, 3, seed=5)
    sampler.set_epoch(2)
    first = list(sampler)
    sampler.set_epoch(3)
    assert list(sampler) != first
    resumed = PairedRepeatSampler(len(examples), 2, 3, seed=5)
    resumed.set_epoch(2)
    assert list(resumed) == first
    dataset = PairedPromptDataset(spatial_pair_dataset(examples, seed=5))
    a, b = dataset[first[0]], PairedPromptDataset(spatial_pair_dataset(examples, seed=5))[first[0]]
    assert a["prompt"] == b["prompt"] and a["pair_id"] == b["pair_id"]
    epoch0, epoch1 = (dataset[pair_key(0, 0, draw, len(examples))] for draw in (0, 1))   # every epoch shows the same pair
    assert (epoch0["prompt"], epoch0["pair_id"]) == (epoch1["prompt"], epoch1["pair_id"])


def test_resume_replays_the_same_pairs(examples):
    "Stop after step 1, resume from checkpoint-1: step 2 sees the same pairs and ends with the same adapter."
    from safetensors.torch import load_file
    from transformers import TrainerCallback
    from consistency_amp.training.models import load_model

    class StopAfterFirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs): control.should_training_stop = True

    def run(out, stop=False, resume=None):
        torch.manual_seed(0)                                   # the LoRA initialisation draws from torch's RNG
        model, processor = load_model()
        args = cpu(output_dir=out, max_steps=2, pairs_per_device=1, learning_rate=1e-2, save_strategy="steps",
                   save_steps=1, seed=0)
        trainer = OTGRPOTrainer(model, args, examples, processing_class=processor,
                                callbacks=[StopAfterFirstStep()] if stop else None)
        seen = []
        texts = [T_, F_, F_, T_]
        scripted(trainer, texts)
        calculate = trainer._calculate_rewards
        trainer._calculate_rewards = lambda inputs, *a: seen.append(inputs[0]["pair_id"]) or calculate(inputs, *a)
        trainer.train(resume_from_checkpoint=resume)
        return seen

    full, part = tempfile.mkdtemp(), tempfile.mkdtemp()
    full_pairs = run(full)
    assert run(part, stop=True) == full_pairs[:1]
    assert run(part, resume=str(Path(part) / "checkpoint-1")) == full_pairs[1:]
    a, b = (load_file(str(Path(d) / "checkpoint-2" / "adapter_model.safetensors")) for d in (full, part))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def text_pairs():
    "Two unlabelled text pairs ('Is a larger than b?' and its swap) for the tiny text model: a task of one's own."
    from datasets import Dataset
    question = lambda a, b: [{"role": "user", "content": f"Is {a} larger than {b}?"}]
    return Dataset.from_list([dict(prompt=question(a, b), prompt_augmented=question(b, a), relation="opposite",
                                   answer_type="boolean") for a, b in [(7, 3), (2, 9)]])


def text_config(output_dir, **settings) -> OTGRPOConfig:
    "The smallest CPU config for `text_pairs`: one pair per step, K = 2, 4-token completions."
    return OTGRPOConfig(**dict(output_dir=str(output_dir), use_cpu=True, bf16=False, report_to="none", num_generations=2,
                               pairs_per_device=1, max_completion_length=4, max_steps=1, gradient_checkpointing=False) | settings)


def test_a_fresh_start_into_an_output_dir_with_checkpoints_is_refused(tmp_path):
    "Trainer writes over an earlier run's checkpoints in its output_dir; OTGRPOTrainer refuses, and resuming it still works."
    import hashlib
    from consistency_amp.training.text_models import load_text_model
    pairs, (model, tokenizer) = text_pairs(), load_text_model()
    config = lambda max_steps: text_config(tmp_path / "own", save_strategy="steps", save_steps=1, max_steps=max_steps)
    args = config(max_steps=1)
    OTGRPOTrainer(model, args, pairs, processing_class=tokenizer).train()
    cut_off = tmp_path / "own" / "checkpoint-5"                          # a save a kill cut off: no trainer_state.json
    cut_off.mkdir(); (cut_off / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    digest = lambda: {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / "own").rglob("*")) if p.is_file()}
    before = digest()
    assert any(name == "adapter_model.safetensors" for name in before)
    again = OTGRPOTrainer(model, args, pairs, processing_class=tokenizer)
    with pytest.raises(FileExistsError, match=r"holds an earlier run's checkpoints \(checkpoint-1\).*resume_from_checkpoint=True"):
        again.train()
    assert digest() == before                                              # nothing written over
    # Trainer, resumed from a checkpoint at max_steps, would train one step more (checkpoint-2): refused, in both forms
    for resume in (True, str(tmp_path / "own" / "checkpoint-1")):
        with pytest.raises(ValueError, match=r"checkpoint-1 is at step 1 of max_steps=1: the run is complete"):
            again.train(resume_from_checkpoint=resume)
    assert digest() == before
    longer = OTGRPOTrainer(model, config(max_steps=2), pairs, processing_class=tokenizer)
    assert longer.train(resume_from_checkpoint=True).global_step == 2    # resuming the run it holds (not the cut-off save)
    assert sorted(p.name for p in (tmp_path / "own").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-5"]
    # only the cut-off save in an output_dir: no earlier run to protect, and a resume starts from step 0 (Trainer's own
    # pick, the newest folder, would fail to load it, at every retry)
    only_cut = tmp_path / "cut"; (only_cut / "checkpoint-1").mkdir(parents=True)
    fresh = OTGRPOTrainer(model, text_config(only_cut, save_strategy="steps", save_steps=1, max_steps=1), pairs, processing_class=tokenizer)
    assert fresh.train(resume_from_checkpoint=True).global_step == 1 and (only_cut / "checkpoint-1" / "trainer_state.json").is_file()


def test_answers_in_another_format_are_said(tmp_path):
    "Short completions, none in the format the rewards parse (a model answering 'Yes' in its own words): said, with the way out."
    from consistency_amp.training.text_models import load_text_model
    model, tokenizer = load_text_model()
    trainer = OTGRPOTrainer(model, text_config(tmp_path, save_strategy="no"), text_pairs(), processing_class=tokenizer)
    yes = tokenizer("Yes", add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    trainer._generate_single_turn = lambda prompt_ids, *a, **k: ([yes for _ in prompt_ids], None)   # well under the cap
    with pytest.warns(UserWarning, match="no completion of a step gave a parseable answer: the rewards parse <think>"):
        trainer.train()


def test_answers_cut_off_by_max_completion_length_are_said(tmp_path):
    "Every completion at the cap and none parseable: reward 0 and no learning, which a user would otherwise see only as a flat log."
    from consistency_amp.training.text_models import load_text_model
    model, tokenizer = load_text_model()
    trainer = OTGRPOTrainer(model, text_config(tmp_path, save_strategy="no"), text_pairs(), processing_class=tokenizer)
    think = tokenizer("<think>", add_special_tokens=False).input_ids[:1]
    trainer._generate_single_turn = lambda prompt_ids, *a, **k: ([think * 4 for _ in prompt_ids], None)   # cut off at 4
    with pytest.warns(UserWarning, match="every completion reached max_completion_length=4 without a parseable answer"):
        trainer.train()
