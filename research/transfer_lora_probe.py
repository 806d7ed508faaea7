"""Issue 26 probe 4: does a smaller LoRA, or one on the lower or upper layers only, keep the other tasks' claims
varying while depth trains? (session 17, 2026-11-25)

Depth trained alone with the accuracy reward at the miniature experiment's settings (80 steps, K 8, 2 pairs, lr 2e-4,
seed 0) through `sweep_val.py` (the experiment's training world; evaluation on the val world, 200 per task), one arm
per LoRA: r 32 on every layer (the default), r 4 (alpha 8), r 32 on layers 0-1 only, r 32 on layers 2-3 only (the
large base has 4). Two arms at a time, one thread each; then the table of `transfer_lora_table.py`.

    python research/transfer_lora_probe.py          # the four arms above
    python research/transfer_lora_probe.py more     # then: size trained alone with r 4, and depth with r 4 on seed 1
    python research/transfer_lora_probe.py smaller  # then: r 32 with a smaller update (lr 1e-4; or 40 steps)
"""
import json, subprocess, sys

LEAVES = "(?:q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
def layers(which: str) -> str: return rf"(?:.*\.)?language_model\.layers\.[{which}]\.(?:.*\.)?{LEAVES}"

BASE = dict(task="depth", reward="accuracy", steps=80, num_generations=8, pairs_per_device=2, learning_rate=2e-4, seed=0)
ARMS = {"depth_acc_r32": {}, "depth_acc_r4": dict(model_args=dict(lora_r=4, lora_alpha=8)),
        "depth_acc_low": dict(model_args=dict(lora_target_modules=layers("01"))),
        "depth_acc_high": dict(model_args=dict(lora_target_modules=layers("23")))}
MORE = {"size_acc_r4": dict(task="size", model_args=dict(lora_r=4, lora_alpha=8)),
        "depth_acc_r4_seed1": dict(seed=1, model_args=dict(lora_r=4, lora_alpha=8))}
SMALLER = {"depth_acc_lr1e-4": dict(learning_rate=1e-4), "depth_acc_s40": dict(steps=40)}
env = {"OMP_NUM_THREADS": "1"}
import os
if sys.argv[1:] == ["more"]: ARMS = MORE
if sys.argv[1:] == ["smaller"]: ARMS = SMALLER
names = list(ARMS)
for pair in (names[:2], names[2:]):
    procs = [subprocess.Popen([sys.executable, "research/sweep_val.py", n, json.dumps(BASE | ARMS[n]), "200"],
                              stdout=open(f"scratch/{n}.log", "w"), stderr=subprocess.STDOUT, env=os.environ | env) for n in pair]
    for p in procs: p.wait()
subprocess.run([sys.executable, "research/transfer_lora_table.py", *(f"scratch/sweep_runs/{n}" for n in names)])
