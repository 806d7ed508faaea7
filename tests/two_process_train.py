"""Two-process OT-GRPO run, started by `tests/test_two_process.py` as

    torchrun --nproc_per_node 2 tests/two_process_train.py OUT_DIR WORLD_ROOT [MODE]

(`accelerate launch --cpu --num_processes 2` would silently run a single process on a CPU-only machine.)

Both ranks train the tiny model with `OTGRPOTrainer` for two steps on scripted completions. Each rank's local batch
holds 3 groups of K, so of the 3 pairs of a global batch the middle one has its x group on rank 0 and its x' group on
rank 1. Each rank writes what it saw to OUT_DIR/rank{r}.json: its rows, its completions, the gathered reward columns
TRL got back from `_calculate_rewards`, and its slice of the advantages. The test recomputes everything in one process.
MODE 1 (`share_prompt_forward`): the trainer forwards each distinct prompt once in the loss pass (the model and its
adapter are seeded and LoRA dropout is 0, so that the logged gradient norms compare with the default run's). MODE
`sampled`: the completions are sampled by the model (transformers' generate), not scripted; MODE `prefill`: sampled
with `share_prompt_prefill` (each distinct prompt prefilled once), and each rank records whether its generations took
the shared prefill; MODE `eval`: no training, TRL's evaluation (`trainer.evaluate()`) of the same examples as
`eval_dataset`, with scripted completions and 3 groups per rank in each evaluation batch, and the metrics it returned.
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

K = 2                      # group size
GROUPS_PER_RANK = 3        # local batch = 3 groups: pairs never align with ranks
SCRIPTED = ("<think>a</think><answer>True</answer>", "<think>b</think><answer>False</answer>", "<answer>maybe</answer>")


def scripted_texts(rank: int, call: int, n: int) -> list[str]:
    "Reproducible pseudo-random completions for the `n` prompts of `rank` at its `call`-th generation."
    rng = np.random.default_rng([rank, call])
    return [SCRIPTED[i] for i in rng.choice(len(SCRIPTED), size=n, p=[0.45, 0.45, 0.1])]


def examples_of(world_root) -> list:
    "Orientation and depth examples of the synthetic world at `world_root`."
    from consistency_amp.world.task_splits import build_examples, load_sources
    scenes = load_sources(world_root, sources=("SUNRGBD",))["SUNRGBD"]
    return [e for task in ("orientation", "depth") for e in build_examples(scenes, task)]


def record_run(out_dir: str, world_root: str, mode: str = "0") -> None:
    "Train two steps on this rank and write what it saw to OUT_DIR/rank{r}.json."
    from consistency_amp.training.models import load_model
    from consistency_amp.training.trainer import OTGRPOConfig, OTGRPOTrainer

    import transformers, warnings
    import consistency_amp.training.image_features as image_features
    prefilled, own_shared_prefill = [], image_features.shared_prefill
    def counted(*a, **k):
        out = own_shared_prefill(*a, **k); prefilled.append(out is not None); return out
    image_features.shared_prefill = counted
    transformers.set_seed(0)   # the same adapter in every run
    model, processor = load_model(lora_dropout=0.0)
    args = OTGRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=2, num_generations=K, pairs_per_device=None,
                        per_device_train_batch_size=GROUPS_PER_RANK * K, max_completion_length=16,
                        learning_rate=1e-3, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                        logging_steps=1, gradient_checkpointing=False, seed=0, share_prompt_forward=mode == "1",
                        share_prompt_prefill=mode == "prefill", per_device_eval_batch_size=GROUPS_PER_RANK * K)
    examples = examples_of(world_root)
    trainer = OTGRPOTrainer(model, args, examples, processing_class=processor, eval_dataset=examples if mode == "eval" else None)
    rank, tokenizer = trainer.accelerator.process_index, processor.tokenizer
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    record, calls = [], [0]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        texts = scripted_texts(rank, calls[0], len(prompt_ids))
        calls[0] += 1
        return [tokenizer(t, add_special_tokens=False).input_ids + [eos] for t in texts], None

    calculate, score = trainer._calculate_rewards, trainer._generate_and_score_completions

    def recording_calculate(inputs, prompts, completions, completion_ids_list):
        gathered = calculate(inputs, prompts, completions, completion_ids_list)
        record.append({"rows": [{k: row[k] for k in ("key", "pair_id", "side", "relation", "answer_type")}
                                for row in inputs],
                       "completions": [c[0]["content"] for c in completions],
                       "rewards": gathered.tolist(), "reward_names": list(trainer.reward_func_names)})
        return gathered

    def recording_score(inputs):
        output = score(inputs)
        record[-1]["advantages"] = output["advantages"].tolist()
        return output

    if mode not in ("sampled", "prefill"): trainer._generate_single_turn = generate
    trainer._calculate_rewards, trainer._generate_and_score_completions = recording_calculate, recording_score
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = trainer.evaluate() if mode == "eval" else None
        if mode != "eval": trainer.train()
    info = {"metrics": metrics, "fell_back": [str(w.message) for w in caught if "could not be shared" in str(w.message)],
            "prefilled": prefilled, "rank": rank, "world_size": trainer.accelerator.num_processes,
            "distributed_type": str(trainer.accelerator.distributed_type), "steps": record,
            "log": [h for h in trainer.state.log_history if "loss" in h]}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(info))


MODES = ("0", "1", "sampled", "prefill", "eval")


def main(out_dir: str, world_root: str, mode: str = "0") -> None:
    from consistency_amp.training.train_cli import end_process_group
    if mode not in MODES: sys.exit(f"MODE must be one of {', '.join(MODES)}; got {mode!r}")
    record_run(out_dir, world_root, mode)
    # as the training entry ends: the trainer (its DDP model's Reducer holds the group) is gone with record_run's
    # frame; free it, then leave the group, so that no communication thread runs at interpreter teardown (a CI run
    # aborted there, "terminate called without an active exception", when the group was destroyed under a live model)
    end_process_group()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(f"usage: torchrun --nproc_per_node 2 {sys.argv[0]} OUT_DIR WORLD_ROOT [MODE ({', '.join(MODES)})]")
    main(*sys.argv[1:])
