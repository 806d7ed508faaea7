#!/usr/bin/env bash
# share_prompt_forward, fused_rms_norm and rotary_in_one_pass on a lent GPU machine (issue 23), in one call (sessions
# 28 and 29 made them on the CPU):
#   1. the bf16 exactness and cost of the first two at the paper's load, one forward and backward with gradient
#      checkpointing: per-token log-probabilities and LoRA gradients against TRL's path, with each path's time and
#      peak memory (benchmarks/gpu_shared_prompt_check.py);
#   2. decoding alone, ms per decoded token for 64 rows: LoRA layers, merged, merged + fused norms, + rotary in one
#      pass, + each group's projections stacked (fuse_projections), + each prompt prefilled once (its prefill
#      seconds), and the static cache eager; first, the stacked projections' bf16 exactness (next-token logits)
#      (benchmarks/gpu_decode_check.py, seconds per arm);
#   3. the 7B step at 512 tokens with merged sampling: rows forwarded whole (transformers' norms), each prompt
#      forwarded once, and every RMSNorm as torch's fused operator, interleaved (2 steps each after a warm-up step):
#      what the first takes off loss + backward (9.4 s on the H100 in session 23), what the second takes off
#      generation (18-26 s there, launch-bound) and loss + backward.
# Everything lands in $OUT. Run from the repository root with the carried wheels (bash tools/pack_wheels_for_device.sh):
#   bash benchmarks/gpu_shared_prompt_check.sh              # carry [".whl"]; about 8 minutes: timeout_s 590
# A dry run of the wiring on the CPU (the tiny model, float32):
#   SKIP_INSTALL=1 ARCH=tiny LENGTH=16 PROMPTS=2 K=2 OUT=/tmp/dry bash benchmarks/gpu_shared_prompt_check.sh
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd); OUT=${OUT:-/tmp/shared_prompt_out}; mkdir -p "$OUT"; cd "$REPO"
CHECK_TIMEOUT=${CHECK_TIMEOUT:-130}; DECODE_TIMEOUT=${DECODE_TIMEOUT:-170}; STEP_TIMEOUT=${STEP_TIMEOUT:-270}
STEPS=${STEPS:-2}; ROUNDS=${ROUNDS:-1}
ARCH=${ARCH:-7B}; LENGTH=${LENGTH:-512}; PROMPTS=${PROMPTS:-8}; K=${K:-8}; PYTHON=${PYTHON:-python3}
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PYTHON -c "import sys, torch, transformers, trl, peft
print(sys.version.split()[0], torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)"
  date -u; } > "$OUT/machine.txt" 2>&1; cat "$OUT/machine.txt"
log=$OUT/shared_prompt_check_${ARCH}_${LENGTH}.txt
timeout "$CHECK_TIMEOUT" $PYTHON benchmarks/gpu_shared_prompt_check.py --arch "$ARCH" --completion-length "$LENGTH" \
  --prompts "$PROMPTS" --K "$K" > "$log" 2>&1
echo "exactness check rc $?"
grep -vE "[Ww]arn" "$log" | tail -7
log=$OUT/decode_check_${ARCH}.txt
timeout "$DECODE_TIMEOUT" $PYTHON benchmarks/gpu_decode_check.py --arch "$ARCH" --prompts "$PROMPTS" --K "$K" --rounds "$ROUNDS" \
  --json "$OUT/decode_check_${ARCH}.json" > "$log" 2>&1
echo "decode check rc $? (124: cut by DECODE_TIMEOUT=$DECODE_TIMEOUT)"
grep -vE "[Ww]arn" "$log" | tail -9
log=$OUT/step_time_${ARCH}_${LENGTH}_merged_shared_prompt_fused_norm_arms.log
timeout "$STEP_TIMEOUT" $PYTHON benchmarks/bench_step_time.py --arch "$ARCH" --completion-length "$LENGTH" --pairings minimal \
  --pairs-per-device $((PROMPTS / 2)) --K "$K" --trainer-args '{"merge_lora_for_generation": true}' --shared-prompt-arm \
  --fused-norm-arm --steps "$STEPS" --warmup 1 \
  --json "$OUT/step_time_${ARCH}_${LENGTH}_merged_shared_prompt_fused_norm_arms.json" > "$log" 2>&1
echo "$ARCH step rc $? (124: cut by STEP_TIMEOUT=$STEP_TIMEOUT; the steps done are in the log)"
grep -E "^step |^minimal|^prompts forwarded|^fused RMSNorms|^peak|^prompt lengths|^completion lengths|^GPU|Error" "$log" | tail -20
