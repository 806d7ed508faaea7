#!/usr/bin/env bash
# Compiled decoding on a lent GPU machine (issue 23), in one call, after session 23's fixes (no input-gradient hooks
# while sampling, so torch 2.11 compiles the decoding step without a graph break, as checked on the CPU in session 24;
# a static cache in 128-token blocks, so no recompilation when a prompt grows by a token):
#   1. the tiny model's exactness with CUDA graphs (does step 1 still differ from eager, now that the sampler is
#      reseeded before each generation? and if so, only in the call that compiles, which the check runs once more
#      before step 1's recorded one?), and the number of graphs and graph breaks on the GPU;
#   2. the 7B step at 512 tokens, merged sampling, eager against compiled decoding (ABBA, after 2 warm-up steps: the
#      compile happens in the second).
# Everything lands in $OUT. Run from the repository root with the carried wheels (bash tools/pack_wheels_for_device.sh):
#   bash benchmarks/gpu_compiled_decoding_check.sh          # carry [".whl"]; about 8 minutes: timeout_s 570
# A dry run of the wiring on the CPU (nothing compiles there unless forced; the tiny model):
#   SKIP_INSTALL=1 ARCH=tiny LENGTH=16 CHECK_STEPS=2 OUT=/tmp/dry bash benchmarks/gpu_compiled_decoding_check.sh
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd); OUT=${OUT:-/tmp/compiled_out}; mkdir -p "$OUT"; cd "$REPO"
CHECK_TIMEOUT=${CHECK_TIMEOUT:-120}; STEP_TIMEOUT=${STEP_TIMEOUT:-420}; STEPS=${STEPS:-3}; CHECK_STEPS=${CHECK_STEPS:-4}
ARCH=${ARCH:-7B}; LENGTH=${LENGTH:-512}; PYTHON=${PYTHON:-python3}
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1 TORCH_LOGS=graph_breaks,recompiles
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PYTHON -c "import sys, torch, transformers, importlib.util as u; t = u.find_spec('triton') and __import__('triton').__version__
print(sys.version.split()[0], torch.__version__, 'triton', t, 'transformers', transformers.__version__)"
  date -u; } > "$OUT/machine.txt" 2>&1; cat "$OUT/machine.txt"
log=$OUT/compiled_generation_check_merge_gc.txt
timeout "$CHECK_TIMEOUT" $PYTHON benchmarks/compiled_generation_check.py --gradient-checkpointing --merge --steps "$CHECK_STEPS" \
  > "$log" 2>&1
echo "tiny check rc $? (0: the same completions as eager at every step)"
grep -E "^torch |^compiled graphs|graph break x|^generate seconds|^the same completions|^first position|^step 1.s compiling|Error" "$log" | tail -10
log=$OUT/step_time_${ARCH}_${LENGTH}_merged_compiled_arm.log
timeout "$STEP_TIMEOUT" $PYTHON benchmarks/bench_step_time.py --arch "$ARCH" --completion-length "$LENGTH" --pairings minimal \
  --trainer-args '{"merge_lora_for_generation": true}' --compiled-generation-arm --steps "$STEPS" --warmup 2 \
  --json "$OUT/step_time_${ARCH}_${LENGTH}_merged_compiled_arm.json" > "$log" 2>&1
echo "$ARCH step rc $? (124: cut by STEP_TIMEOUT=$STEP_TIMEOUT; the steps done are in the log)"
grep -E "^step |^minimal|^compiled decoding|^peak|^completion lengths|Error" "$log" | tail -14
echo "recompilations: $(grep -c 'Recompiling function' "$log"), graph-break reports: $(grep -c 'Graph break' "$log")"
