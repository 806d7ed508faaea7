#!/usr/bin/env bash
# Set up the project's Python environment; safe to run again.
#
# * Inside an active virtualenv or conda env, installs there; otherwise creates and uses ./.venv.
# * torch is installed only when none is importable, so a GPU user's own (CUDA) torch is kept.
#   On a CPU machine whose pip index offers a local CPU build of torch==2.13.0 (ours does), that build
#   is taken instead of several GB of CUDA wheels. Override with TORCH_SPEC="torch==X.Y".
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: takes no arguments (-h for what it does); got $1" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
  [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
python -m pip install --quiet --upgrade pip
if python -c "import torch" 2>/dev/null; then
  echo "setup: keeping the installed torch $(python -c 'import torch; print(torch.__version__)')"
else
  python -m pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
fi
python -m pip install --quiet -e ".[dev]"
echo "setup: ready in $(python -c 'import sys; print(sys.prefix)')"
