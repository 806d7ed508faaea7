"""Compiled decoding in training (`OTGRPOConfig.compile_generation`, issue 23): does transformers' compiled decode step
follow the weights as they change from step to step, with and without `merge_lora_for_generation` (which swaps each
adapted layer's weight storage for a merged copy at every generation)? A CUDA graph that kept the first step's weight
pointers, or a compiled graph that kept its first weights, would sample stale completions.

Trains the tiny model a few steps twice from one seed, compiled and not, and compares every sampled completion token
for token. Before each generation the sampler is reseeded and the adapter's `lora_B` moves by seeded noise (the tiny model earns no reward, so
training alone would leave the weights where they were and the check would prove nothing). transformers compiles on
GPUs only; on the CPU the script forces it (`CompileConfig._compile_all_devices`, inductor's default mode, no CUDA
graphs); on a GPU it keeps transformers' default (mode "reduce-overhead": CUDA graphs). Float32 on either device, so
the two runs should agree to the token (bf16 exactness of the merged path: `gpu_merge_check.py`).

    OMP_NUM_THREADS=1 python benchmarks/compiled_generation_check.py            # CPU: ~2 min (the compile is ~1 min)
    python benchmarks/compiled_generation_check.py --merge --steps 4            # merged weights, compiled
    python benchmarks/compiled_generation_check.py --gradient-checkpointing     # as on a GPU: one graph, or recompiles?
    python benchmarks/compiled_generation_check.py --merge --fused-norms        # with torch's rms_norm (fused_rms_norm)
    python benchmarks/compiled_generation_check.py --merge --fused-norms --rotary-one-pass   # and rotary_in_one_pass
    python benchmarks/compiled_generation_check.py --merge --fuse-projections   # each group's projections one matmul
    TORCH_LOGS=graph_breaks python benchmarks/compiled_generation_check.py --gradient-checkpointing --stock-hooks
                                             # TRL's input-gradient hooks as they are: graph breaks under torch 2.11
"""
import argparse, tempfile, time
from contextlib import nullcontext
from pathlib import Path

import torch
import transformers
from torch._dynamo.utils import counters
from transformers import CompileConfig

import consistency_amp.training.trainer as trainer_module
from consistency_amp.training.models import load_model
from consistency_amp.training.trainer import OTGRPOConfig, OTGRPOTrainer
from consistency_amp.world.synthetic import make_synthetic_world
from consistency_amp.world.task_splits import build_examples, load_sources


def tiny_examples(n_images: int = 8) -> list:
    root = make_synthetic_world(Path(tempfile.mkdtemp()) / "world", n_images_per_split={"train": n_images},
                                sources=("SUNRGBD",), indoor_size=(320, 240))
    scenes = load_sources(root, sources=("SUNRGBD",))["SUNRGBD"]
    return [e for task in ("orientation", "depth") for e in build_examples(scenes, task)]


def sampled_completions(examples, compiled: bool, merge: bool, steps: int, device: str,
                        gradient_checkpointing: bool = False, fused_norms: bool = False,
                        one_pass_rotary: bool = False, compiling_call: list | None = None,
                        stacked: bool = False) -> tuple[list, list]:
    """(completion ids of every generation, seconds of each) of `steps` training steps from seed 0. Given a list as
    `compiling_call`, the first generation runs twice with the same seed and weights: the first call (where a compiled
    run compiles) is put in that list, the second is the one recorded."""
    replay_first, compiling_call = compiling_call is not None, compiling_call if compiling_call is not None else []
    transformers.set_seed(0)
    model, processor = load_model(lora_dropout=0.0, device=device)
    config = OTGRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=device == "cpu", report_to=[], save_strategy="no",
                          bf16=False, num_generations=4, pairs_per_device=2, max_completion_length=16,
                          gradient_checkpointing=gradient_checkpointing, max_steps=steps, learning_rate=1e-2, logging_steps=1,
                          compile_generation=compiled, merge_lora_for_generation=merge, fused_rms_norm=fused_norms,
                          rotary_in_one_pass=one_pass_rotary, fuse_projections=stacked)
    trainer = OTGRPOTrainer(model, config, examples, processing_class=processor)
    if compiled and device == "cpu":   # transformers compiles only on accelerators unless told otherwise
        trainer.generation_config.compile_config = CompileConfig(mode="default")
        trainer.generation_config.compile_config._compile_all_devices = True
    sampled, seconds, generate = [], [], trainer._generate_single_turn
    def moved_then_generated(*args, **kwargs):
        noise = torch.Generator().manual_seed(len(sampled))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name: p.add_(torch.randn(p.shape, generator=noise).to(p) * 0.05)
        if replay_first and not sampled:   # the first generation twice: the call that compiles, then the same again
            torch.manual_seed(1000); compiling_call.extend(generate(*args, **kwargs)[0])
        # the sampler's random stream restarts at each generation: whatever the compilation draws from the generator
        # (it may run kernels on random inputs) cannot shift the compiled run's sampling against the eager run's
        torch.manual_seed(1000 + len(sampled))
        t0 = time.perf_counter()
        ids, logprobs = generate(*args, **kwargs)
        seconds.append(time.perf_counter() - t0); sampled.append(ids)
        return ids, logprobs
    trainer._generate_single_turn = moved_then_generated
    trainer.train()
    return sampled, seconds


def first_difference(a: list, b: list) -> int | None:
    "The first decoded position at which any row of generation `a` differs from `b`'s (None: none does)."
    positions = [next((i for i, (x, y) in enumerate(zip(r, s)) if x != y), None if len(r) == len(s) else min(len(r), len(s)))
                 for r, s in zip(a, b)]
    positions += [0] * (len(a) != len(b))   # rows missing altogether differ from the start
    return min((i for i in positions if i is not None), default=None)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--merge", action="store_true", help="sample from merged LoRA weights (merge_lora_for_generation)")
    ap.add_argument("--steps", type=int, default=3, help="training steps per run (each samples once)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--gradient-checkpointing", action="store_true",
                    help="train with gradient checkpointing, as on a GPU (TRL toggles it around each generation)")
    ap.add_argument("--fused-norms", action="store_true",
                    help="every RMSNorm as torch's one rms_norm operator (fused_rms_norm), in both runs: does the "
                         "compiled step take the norms' instance forwards without a graph break or a recompilation?")
    ap.add_argument("--rotary-one-pass", action="store_true",
                    help="queries and keys rotated in one pass while sampling (rotary_in_one_pass), in both runs: does "
                         "the compiled step keep one graph when the modeling module's function is swapped per generation?")
    ap.add_argument("--fuse-projections", action="store_true",
                    help="with --merge: each group's projections stacked and run as one matmul (fuse_projections), in "
                         "both runs: does the compiled step trace the groups' forwards without a graph break?")
    ap.add_argument("--stock-hooks", action="store_true",
                    help="leave TRL's input-gradient hooks as they are (they pile up, and stay on while sampling): the "
                         "trainer's replace_input_grads_hooks and without_input_grads_hooks switched off, to see their effect")
    args = ap.parse_args()
    if args.stock_hooks:   # the trainer calls both by these names in _generate_single_turn and __init__
        trainer_module.replace_input_grads_hooks = lambda model: None
        trainer_module.without_input_grads_hooks = lambda model: nullcontext()
    examples = tiny_examples()
    compiling_call = []
    compiled, compiled_s = sampled_completions(examples, True, args.merge, args.steps, args.device,
                                               args.gradient_checkpointing, args.fused_norms, args.rotary_one_pass,
                                               compiling_call, args.fuse_projections)
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    eager, eager_s = sampled_completions(examples, False, args.merge, args.steps, args.device,
                                         args.gradient_checkpointing, args.fused_norms, args.rotary_one_pass,
                                         stacked=args.fuse_projections)
    same = [a == b for a, b in zip(compiled, eager)]
    hooks = "as TRL leaves them" if args.stock_hooks else "the trainer's (none while sampling)"
    print(f"torch {torch.__version__}, device {args.device}, merged weights {args.merge}, gradient checkpointing "
          f"{args.gradient_checkpointing}, fused norms {args.fused_norms}, rotary in one pass {args.rotary_one_pass}, "
          f"stacked projections {args.fuse_projections}, "
          f"input-gradient hooks {hooks}, "
          f"{args.steps} steps, weights moved before each generation")
    print(f"compiled graphs {graphs} (one: never recompiled from step to step), graph breaks {breaks}")
    for reason, n in counters["graph_break"].items(): print(f"  graph break x{n}: {reason.strip().splitlines()[0][:200]}")
    print("generate seconds, compiled:", [round(s, 3) for s in compiled_s], " eager:", [round(s, 3) for s in eager_s])
    print(f"the same completions, token for token, per step: {same}")
    print("first position where a row differs, per step (None: none):",
          [first_difference(a, b) for a, b in zip(compiled, eager)])
    # Step 1 differed from eager on the H100 (session 23) and steps 2-3 did not. The call that compiles is run once
    # more before step 1's recorded one: if only that call differs, what differs is the compiling call itself (what
    # it draws from the random stream, or its warm-up runs), not the compiled graph's arithmetic or stale weights.
    print(f"step 1's compiling call (before the recorded one, same seed and weights) the same as eager: "
          f"{compiling_call == eager[0]}, first differing position {first_difference(compiling_call, eager[0])}")
    if not all(same) or len(same) != args.steps: raise SystemExit("compiled decoding sampled other completions")
