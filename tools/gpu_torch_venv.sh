#!/usr/bin/env bash
# A CPU venv with the lent GPU machines' torch (2.11.0, CUDA 13 build; it runs on the CPU) and this checkout's other
# packages at their versions: to reproduce on the CPU what depends on the torch release rather than on the GPU, such
# as torch.compile's graph breaks (torch 2.11's dynamo breaks the graph where torch 2.13's does not;
# benchmarks/README.md, session 24). About 6 GB (the CUDA libraries come with it) and 2-3 minutes.
#
#   bash tools/gpu_torch_venv.sh
#   PYTHONPATH=$PWD .venv-gpu-torch/bin/python benchmarks/compiled_generation_check.py --gradient-checkpointing --merge
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "gpu_torch_venv: no .venv; run bash tools/setup.sh first (its versions are copied)"; exit 2; }
TORCH_SPEC=${TORCH_SPEC:-torch==2.11.0}   # the machines' own torch (KINDS.md of the device tool; benchmarks/README.md)
[ -x .venv-gpu-torch/bin/python ] || python3 -m venv .venv-gpu-torch
.venv-gpu-torch/bin/python -m pip install -q "$TORCH_SPEC"
.venv/bin/python -m pip freeze --exclude-editable | grep -vE '^(torch|triton|nvidia-)' > .venv-gpu-torch/requirements.txt
.venv-gpu-torch/bin/python -m pip install -q --no-deps -r .venv-gpu-torch/requirements.txt
.venv-gpu-torch/bin/python -c "import torch, transformers, trl; print('gpu_torch_venv: torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)"
