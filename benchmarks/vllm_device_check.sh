#!/usr/bin/env bash
# vLLM with the paired trainer on a lent GPU machine (issue 23): assemble vLLM 0.26.0 from the parts carried by the
# earlier calls (tools/pack_vllm_for_device.sh; one call per part copies it to $PARTS, /tmp/vllm_parts, which the
# machine keeps between calls while it stays warm; session 38 found that a folder inside the checkout is not kept:
# .vllm/received held only the last call's part), install it beside the
# carried wheels (.whl), then time a real training step through TRL's vLLM generation (colocate) and a run's
# evaluation through `--backend vllm` and `vllm-lora`, each under its own time limit. Everything lands in $OUT.
#
#   ARCH=3B STEP_TIMEOUT=300 EVAL_TIMEOUT=330 LORA_EVAL_TIMEOUT=150 BUDGET=570 bash benchmarks/vllm_device_check.sh
#                                                  # carry [".whl", ".vllm/sums"], timeout_s 590
# 7B colocated: its training peaks at 63 GiB beside the engine's 35% share of an 80 GB card, so the engine must sleep
# (TRL frees its weights and KV cache while the trainer runs, and re-sends the weights before each generation):
#   ARCH=7B TRAINER_ARGS='{"vllm_enable_sleep_mode": true}' bash benchmarks/vllm_device_check.sh
# On an H200 (139 GiB) the same sum, 63 GiB beside 35% of 139 (49 GiB), leaves room without sleep (session 44: a peak
# of 111.6 GiB), so the paper's configuration is timed as issue 23's targets ask (7B, 512 tokens; item 4's 6 steps per
# arm, minimal against random in ABBA, switched inside one trainer and one engine), then a run's evaluation:
#   STAGES=step ARCH=7B LENGTH=512 PAIRINGS=minimal,random STEPS=6 STEP_TIMEOUT=500 BUDGET=560 bash benchmarks/vllm_device_check.sh
#   STAGES=eval ARCH=7B EVALS=merged BUDGET=<the seconds left, less 30> bash benchmarks/vllm_device_check.sh
# (two calls on one warm machine, 397 and 253 s in session 44: a 7B check does not fit one; the second finds vLLM
# unpacked)
# BENCH_ARGS: further bench_step_time.py options for the step, e.g. BENCH_ARGS="--stock-trl after" (stock TRL's
# GRPOTrainer on the same model, through the same engine: item 4's third arm), or, with
# TRAINER_ARGS='{"old_logps_from_loss_forward":false}', BENCH_ARGS='--combined-arm {"old_logps_from_loss_forward":true}'
# (TRL's old-policy pass against the loss forward's log-probabilities, ABBA; JSON without spaces: BENCH_ARGS is split
# on them). The step's bench_step_time.py command dry-runs on the CPU with vLLM's CPU build and --arch tiny-vllm-cpu.
# The plan and the part calls: benchmarks/README.md, "vLLM on the GPU, in parts" and "For the next GPU session".
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd); OUT=${OUT:-/tmp/vllm_out}; mkdir -p "$OUT"
PARTS=${PARTS:-/tmp/vllm_parts}   # where the part calls copied the parts: outside the checkout
ARCH=${ARCH:-3B}; LENGTH=${LENGTH:-256}; STEPS=${STEPS:-2}; PAIRINGS=${PAIRINGS:-minimal}; STEP_TIMEOUT=${STEP_TIMEOUT:-300}; EVAL_TIMEOUT=${EVAL_TIMEOUT:-330}; LORA_EVAL_TIMEOUT=${LORA_EVAL_TIMEOUT:-150}
# the stages this call runs: 'step' (the training step) and 'eval' (the evaluations); a 7B check may need two calls
# on one warm machine, STAGES=step then STAGES=eval: the second finds vLLM unpacked and the random model saved
STAGES=${STAGES:-step eval}
for stage in $STAGES; do case $stage in step|eval) ;; *) echo "vllm_device_check: STAGES holds '$stage'; the choices are step and eval"; exit 2;; esac; done
# the evaluations the eval stage runs, in this order: 'merged' (the adapter folded into the weights, --backend vllm),
# 'lora' (the LoRA engine, with its two retries should it stall), 'lora_eager' (the LoRA engine without CUDA graphs:
# session 44's call with little time left; it stopped as the others had, before any graph)
EVALS=${EVALS:-merged lora}
for e in $EVALS; do case $e in merged|lora|lora_eager) ;; *) echo "vllm_device_check: EVALS holds '$e'; the choices are merged, lora and lora_eager"; exit 2;; esac; done
BUDGET=${BUDGET:-570}   # seconds for the whole script: each evaluation is cut to what is left of it (the call allows 600)
within() { local left=$((BUDGET - SECONDS)); echo $(( left < $1 ? (left > 0 ? left : 1) : $1 )); }
if [ -d /tmp/vsite/vllm ]; then echo "vLLM already unpacked in /tmp/vsite (an earlier call on this machine)"; else
  cd "$PARTS" 2>/dev/null && cat part_* > /tmp/site.tar.xz && cd /tmp && sha256sum -c "$REPO/.vllm/sums/SHA256SUMS" ||
    { echo "vllm_device_check: the parts in $PARTS are incomplete (the machine was released between calls?):";
      ls -la "$PARTS"; exit 2; }
  mkdir -p /tmp/vsite.new && xz -T0 -dc site.tar.xz | tar -C /tmp/vsite.new -xf - && mv /tmp/vsite.new /tmp/vsite && rm site.tar.xz || exit 2
fi
cd "$REPO"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
# the vLLM parts bring transformers 5.22.2 (vllm_device_requirements.txt: vLLM 0.26 fails with 5.23 and later)
rm -rf /tmp/site/transformers /tmp/site/transformers-*.dist-info
# vLLM's FlashInfer sampler compiles its kernels on first use: the PyTorch sampler needs no compiler and no time
export PYTHONPATH=/tmp/site:/tmp/vsite:$REPO PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
python3 -c "import torch, vllm, trl; print('vllm', vllm.__version__, 'torch', torch.__version__, 'trl', trl.__version__)" \
  > "$OUT/vllm_import.txt" 2>&1; echo "import rc $?"; tail -3 "$OUT/vllm_import.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$OUT/vllm_import.txt"
# session 38's GPU logs held none of vLLM's own INFO lines, which its CPU build prints: the machine's VLLM_* settings
{ echo "the machine's VLLM_* environment:"; env | grep '^VLLM_' | grep -v '^VLLM_USE_FLASHINFER_SAMPLER='; } >> "$OUT/vllm_import.txt"
log=$OUT/step_time_${ARCH}_${LENGTH}_vllm.log
if [[ " $STAGES " == *" step "* ]]; then
# SIGTERM at the limit: bench_step_time.py stops training and writes the JSON of the steps that ended (a 7B run of 13
# steps may not fit), within the 30 s before SIGKILL
timeout -k 30 "$STEP_TIMEOUT" python3 benchmarks/bench_step_time.py --arch "$ARCH" --completion-length "$LENGTH" --pairings "$PAIRINGS" \
  --use-vllm colocate --steps "$STEPS" --warmup 1 --trainer-args "${TRAINER_ARGS:-{\}}" ${BENCH_ARGS:-} \
  --json "$OUT/step_time_${ARCH}_${LENGTH}_vllm.json" > "$log" 2>&1
echo "training step rc $?"; grep -E "^step|^arm|^minimal|peak|lengths|^GPU|Error|error" "$log" | tail -13
fi
[[ " $STAGES " == *" eval "* ]] || exit 0
# save_random_model.py never writes over a folder: a second call finds the first one's
[ -d "/tmp/random-$ARCH-lora" ] || python3 benchmarks/save_random_model.py --arch "$ARCH" --out "/tmp/random-$ARCH" --adapter-out "/tmp/random-$ARCH-lora" \
  > "$OUT/save_random_model.log" 2>&1 || { echo "save_random_model failed"; tail -5 "$OUT/save_random_model.log"; }
# the built-in world's test split holds 7 depth questions, too few to time answering apart from the engine's start: a
# test world of 240 indoor images has 225 questions over the six tasks (46 of depth; at most 30 a task: 161), built in
# 4.5 s on the development machine's 2 CPU cores
[ -d /tmp/test-world ] || python3 -c "from consistency_amp.world.synthetic import SyntheticConfig, make_synthetic_world as make
make('/tmp/test-world', SyntheticConfig(n_images_per_split={'test': 240}, sources=('SUNRGBD',)))" > "$OUT/test_world.log" 2>&1 ||
  { echo "test world failed"; tail -3 "$OUT/test_world.log"; }
# Session 38 (H200): the evaluation without an adapter ran (161 questions, 91 s of engine start), but the one with the
# adapter as LoRA, started next, printed nothing after the engine's distributed start within 100 s, nor alone within
# 160 s, and `timeout`'s SIGTERM did not end it: the call's own limit did. Since session 39 `--backend vllm` folds a
# run's adapter into a copy of the weights (on the CPU) and serves it as a plain model, what ran; `--backend
# vllm-lora` is the LoRA engine. Before each evaluation the GPU's processes are listed, vLLM logs at DEBUG, and the
# time limit sends SIGABRT, on which Python's faulthandler (PYTHONFAULTHANDLER) prints every thread's stack, in the
# engine's process too (`timeout` signals its whole process group), then SIGKILL 15 s later.
evaluate() {   # evaluate LABEL LIMIT ARGS...: one evaluation through vLLM, its log in $OUT/eval_vllm_${ARCH}LABEL.log
  local label=$1 limit=$2 log=$OUT/eval_vllm_${ARCH}$1.log start=$(date +%s); shift 2
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$log" 2>&1
  echo "GPU processes before the evaluation$label: $(tail -n +2 "$log" | tr '\n' ' ')"
  PYTHONFAULTHANDLER=1 VLLM_CONFIGURE_LOGGING=1 VLLM_LOGGING_LEVEL=DEBUG timeout -s ABRT -k 15 "$(within "$limit")" python3 -m consistency_amp.evaluation.evaluate \
    --model "/tmp/random-$ARCH" --adapter "/tmp/random-$ARCH-lora" --sources SUNRGBD --data_root /tmp/test-world \
    --consistency_samples 0 --runs_dir /tmp/vllm_runs "$@" >> "$log" 2>&1
  local rc=$?
  echo "evaluation$label rc $rc in $(( $(date +%s) - start )) s (engine start included)"
  grep -v "^\s*$" "$log" | grep -v "DEBUG" | tail -11
  return $rc
}
# a run's evaluation as users run it: the adapter folded into a copy of the 7B's weights, then a plain engine; 161
# questions of the six tasks for item 5's time per 1,000 questions (random weights never end an answer, so each runs
# to the 512 new tokens: an upper bound of a trained model's time); the folding's own time is in the log's load_s
# EVAL_ARGS: further evaluate options for this one, e.g. EVAL_ARGS="--batch_size 16 --run_name random-3B-narrow" (the
# answering time per 1,000 questions in calls of 16 prompts, against the default since session 47: the engine's
# max_num_seqs per call, 1,024 on an H100 or H200, each (task, source) then in one call)
[[ " $EVALS " == *" merged "* ]] && evaluate _merged "$EVAL_TIMEOUT" --backend vllm --max_examples 30 ${EVAL_ARGS:-}
if [[ " $EVALS " == *" lora_eager "* ]]; then
  evaluate _lora_eager "$LORA_EVAL_TIMEOUT" --backend vllm-lora --tasks depth --max_examples 50 \
    --vllm_engine_args '{"enforce_eager": true}' --run_name "random-$ARCH-lora-eager"
fi
[[ " $EVALS " == *" lora "* ]] || exit 0
# the adapter as LoRA (vLLM's kernels), the engine that stalled in session 38
evaluate _lora "$LORA_EVAL_TIMEOUT" --backend vllm-lora --tasks depth --max_examples 50
# Session 44 (H200, 7B) found where the LoRA engine stops: the engine process, forked (vLLM forks unless torch has
# initialised CUDA in the caller; the folded evaluation's engine was spawned, and ran), was inside its first pinned-memory
# allocation (vllm/v1/worker/gpu/buffer_utils.py, UvaBuffer: the V2 model runner's request state, max_num_seqs 1024 x
# max_model_len 128000 int32s) 110 s after it started, before any weight loaded, with enforce_eager (no graphs to
# capture: the first lead of session 43 is ruled out). Since then VLLMDecoder has vLLM spawn its engine
# (spawn_engine_process, nb 50), so the evaluation above starts spawned. Should it still stop, two retries, each in
# its own run folder (the stopped one may hold the first's lock):
# 1. a short max_model_len: the pinned buffer 31 times smaller (4,096 tokens hold a prompt of at most 544 and 512 new);
# 2. the V1 runner: on a GPU vLLM 0.26 runs Qwen2.5-VL on its "Model Runner V2" (vllm/config/vllm.py,
#    use_v2_model_runner), whose request state is that buffer; the CPU build, where the adapter's evaluation always
#    ran, has no Triton and falls back to the V1 runner.
lora_rc=$?
case $lora_rc in 124|137) evaluate _lora_short "$LORA_EVAL_TIMEOUT" --backend vllm-lora --tasks depth --max_examples 50 \
  --vllm_engine_args '{"max_model_len": 4096}' --run_name "random-$ARCH-lora-short"; lora_rc=$? ;; esac
case $lora_rc in 124|137) VLLM_USE_V2_MODEL_RUNNER=0 evaluate _lora_v1_runner "$LORA_EVAL_TIMEOUT" --backend vllm-lora \
  --tasks depth --max_examples 50 --run_name "random-$ARCH-lora-v1-runner" ;; esac
exit 0
