"""consistency_amp: OT-GRPO, label-free consistency rewards for vision-language models (the companion of "The Art of
Interrogation: Consistency Amplifies Factuality in Spatial Reasoning", ICML 2026).

The names a training or evaluation script needs are importable from here: `from consistency_amp import OTGRPOTrainer,
OTGRPOConfig`. They load on first use (PEP 562), so `import consistency_amp` imports neither torch nor TRL.
"""
__version__ = "0.1.0"

# name -> the module that defines it (the one definition; this package only re-exports)
_EXPORTS = {
    "consistency_amp.training.trainer": ("OTGRPOTrainer", "OTGRPOConfig"),
    "consistency_amp.training.train": ("TrainParams", "run_training"),
    "consistency_amp.training.models": ("load_model",),
    "consistency_amp.training.text_models": ("load_text_model",),
    "consistency_amp.training.run_callback": ("StopRequest", "run_callback"),   # a long run that stops cleanly on a signal
    "consistency_amp.reward.pairing": ("consistency_rewards", "pair_rewards", "consistency_reward_func"),
    "consistency_amp.reward.verifiers": ("parse_answer", "accuracy", "consistency", "format_reward_func",
                                         "accuracy_reward_func", "SYSTEM_PROMPT"),
    "consistency_amp.reward.baseline": ("expected_reward",),
    "consistency_amp.reward.paired_data": ("check_paired_dataset", "PAIR_COLUMNS"),
    "consistency_amp.world.spatial_pairs": ("spatial_pair_dataset",),
    "consistency_amp.world.custom_transforms": ("CustomTransform", "custom_pair_maker", "transform_parity"),
    "consistency_amp.evaluation.held_out": ("evaluate",),
    "consistency_amp.evaluation.run_evaluation": ("evaluate_run",),
    "consistency_amp.evaluation.pair_evaluation": ("evaluate_pairs",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE: raise AttributeError(f"module 'consistency_amp' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value                     # later lookups skip __getattr__
    return value


def __dir__(): return sorted(set(globals()) | set(__all__))
