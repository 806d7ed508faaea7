#!/usr/bin/env bash
# The project's own tests on a lent GPU machine (issue 23, item 5), in one call: the GPU-marked tests, every notebook
# with its `slow` and `gpu` cells, and `pytest tests/`'s default selection with a CUDA device present (where models
# load on the GPU by default, so CPU assumptions show). Each phase runs under its own time limit and prints its tail;
# the logs land in $OUT. The wheels (nbdev, papermill, IPython, ipykernel, ... beside the usual ones) come from
#   bash tools/pack_wheels_for_device.sh --tests          # here, before the call (36 MB)
#   bash benchmarks/gpu_test_suite.sh                     # on the device: carry [".whl"], timeout_s 590
# A dry run of the wiring on the CPU:
#   SKIP_INSTALL=1 NBDEV_ARGS="--path nbs/02_core.ipynb" PYTEST_PATHS=tests/test_imports.py OUT=/tmp/dry bash benchmarks/gpu_test_suite.sh
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd); OUT=${OUT:-/tmp/gpu_tests}; mkdir -p "$OUT"; cd "$REPO"
WORKERS=${WORKERS:-8}; GPU_TIMEOUT=${GPU_TIMEOUT:-150}; NBDEV_TIMEOUT=${NBDEV_TIMEOUT:-210}; PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-200}
if [ -z "${SKIP_INSTALL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$REPO PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1
phase() {   # name, time limit, command...: run it, keep its log, print its verdict and tail
  local name=$1 limit=$2; shift 2; local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name: rc $rc in $((SECONDS - start)) s (124: cut by its limit of $limit s)"; tail -4 "$OUT/$name.log"
}
phase pytest_gpu "$GPU_TIMEOUT" python3 -m pytest -m gpu -q -x ${PYTEST_PATHS:-tests/}
phase nbdev_test_slow_gpu "$NBDEV_TIMEOUT" nbdev_test --n_workers "$WORKERS" --timing --flags "slow gpu" ${NBDEV_ARGS:-}
phase pytest "$PYTEST_TIMEOUT" python3 -m pytest -q -n "$WORKERS" --dist loadfile ${PYTEST_PATHS:-tests/}
