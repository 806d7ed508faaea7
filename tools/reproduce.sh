#!/usr/bin/env bash
# The project's main job: set up, then regenerate the paper's figures and tables into figures/ from stored results.
#
#   bash tools/reproduce.sh
#
# * Executes nbs/figures.ipynb with papermill; the executed copy goes to runs/figures/figures-<timestamp>.ipynb
#   (executed notebooks never land under nbs/), the figures and tables to figures/.
# * Prints every file it wrote. Later stages (training, evaluation) will be added before the figures step.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"
bash tools/setup.sh
# shellcheck disable=SC1091
. tools/env.sh

stamp="$(date +%Y%m%d-%H%M%S)"
mkdir -p runs/figures figures
executed="runs/figures/figures-${stamp}.ipynb"
started="runs/figures/.started-${stamp}"
touch "$started"
trap 'rm -f "$started"' EXIT

echo "reproduce: executing nbs/figures.ipynb -> $executed"
papermill -k python3 --cwd "$repo/nbs" nbs/figures.ipynb "$executed" \
  -p out_dir "$repo/figures" -p runs_dir "$repo/runs"

echo "reproduce: executed notebook $repo/$executed"
echo "reproduce: wrote"
find figures -type f -newer "$started" -print | sort | sed "s|^|  $repo/|"
