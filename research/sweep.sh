#!/usr/bin/env bash
# GPU sweep of pretraining recipes: bash research/sweep.sh STEPS  (runs listed below in parallel, JSON lines to stdout)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -3
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
STEPS=${1:-2500}; IPS=${IPS:-300}; LIMIT=${LIMIT:-480}; export DEADLINE=$(( $(date +%s) + ${TRAIN_SECS:-400} ))
date +%T
python3 -c "
from consistency_amp.world.synthetic import SyntheticConfig, default_world
for s in (('SUNRGBD','KITTI'), ('SUNRGBD',)): default_world(SyntheticConfig(seed=7919, n_images_per_split={'train': $IPS}, sources=s))
" 2>&1 | grep -v -i warn | tail -3
date +%T
base="\"steps\": $STEPS, \"images_per_source\": $IPS, \"every\": 250"
declare -A R; pids=()
R[A_probe]="{$base, \"tasks\": [\"depth\"], \"sources\": [\"SUNRGBD\"], \"fixed_wording_fraction\": 1.0, \"think\": \"none\", \"variants\": 1}"
R[B_depth_facts]="{$base, \"tasks\": [\"depth\"], \"think\": \"facts\"}"
R[C_all_facts]="{$base, \"think\": \"facts\"}"
R[D_all_facts_48]="{$base, \"think\": \"facts\", \"max_pixels\": 37632}"
R[E_all_none]="{$base, \"think\": \"none\"}"
R[F_all_facts_lr3]="{$base, \"think\": \"facts\", \"lr\": 0.003}"
R[G_all_facts_large]="{$base, \"think\": \"facts\", \"hidden\": 192, \"heads\": 6, \"layers\": 6, \"vision_depth\": 3, \"vision_hidden\": 96}"
R[H_depth_facts_fixed]="{$base, \"tasks\": [\"depth\"], \"think\": \"facts\", \"fixed_wording_fraction\": 1.0}"
R[A_probe_aux]="{$base, \"tasks\": [\"depth\"], \"sources\": [\"SUNRGBD\"], \"fixed_wording_fraction\": 1.0, \"think\": \"none\", \"variants\": 1, \"aux\": 1.0}"
R[H_depth_facts_fixed_aux]="{$base, \"tasks\": [\"depth\"], \"think\": \"facts\", \"fixed_wording_fraction\": 1.0, \"aux\": 1.0}"
R[B_depth_facts_aux]="{$base, \"tasks\": [\"depth\"], \"think\": \"facts\", \"aux\": 1.0}"
R[C_all_facts_aux]="{$base, \"think\": \"facts\", \"aux\": 1.0}"
R[E_all_none_aux]="{$base, \"think\": \"none\", \"aux\": 1.0}"
R[G_all_facts_large_aux]="{$base, \"think\": \"facts\", \"hidden\": 192, \"heads\": 6, \"layers\": 6, \"vision_depth\": 3, \"vision_hidden\": 96, \"aux\": 1.0}"
for name in ${RUNS:-${!R[@]}}; do
  timeout $LIMIT python3 research/gpu_sweep.py $name "${R[$name]}" > $OUT/$name.log 2>&1 & pids+=($!)
done
while sleep 60; do alive=0; for p in ${pids[@]}; do kill -0 $p 2>/dev/null && alive=1; done
  date +%T; for f in $OUT/*.log; do grep '^{' $f | tail -1; done; [ $alive = 1 ] || break; done
wait; echo "== all"; cat $OUT/*.log | grep '^{'
for f in $OUT/*.log; do echo "== $f"; grep -v '^{' $f | grep -iv warn | tail -3; done
nvidia-smi --query-gpu=memory.used --format=csv,noheader; date +%T
