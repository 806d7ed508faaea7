#!/usr/bin/env bash
# The project's main job: set up, train and evaluate the runs every paper figure needs, then regenerate the paper's
# figures and tables into figures/ from the stored results.
#
#   bash tools/reproduce.sh                 # the miniature experiment (science table) + the mini grid, CPU, ~25 min
#   bash tools/reproduce.sh --full          # the experiment with every condition (the paper's set, pairing, label noise, Figs 2-4, per-task Figs 8 and 6)
#   SCALE=paper bash tools/reproduce.sh     # prints the cluster command lines of the missing paper-scale runs,
#                                           # then draws whatever runs exist (set OMNI3D_ROOT to your data root)
#
# * The miniature experiment (python -m consistency_amp.science.experiment; nbs/73_experiment.ipynb): spatial-base-large
#   trained with the accuracy reward and with the label-free consistency reward (the marker swap on every pair) and its
#   blind control, 3 seeds each, evaluated greedily on 300 held-out examples per task and on the sampled answers
#   (8 at T = 1) of 100 per task (--full: also the consistency reward with the paper's own transformation set and its
#   blind control, the pairing ablation, label noise, the no-ability control and the per-task runs of Figures 2-4 from
#   both spatial bases, with consistency with the marker swap per task from the large one, nbs/69_experiment_figures.ipynb,
#   and the per-task ablations, Figures 8 and 6 on depth and size, nbs/68_ablations.ipynb; about 5 h 50 min, as the README says);
#   writes figures/science.{md,csv}, figures/science_{accuracy,monitor,claims,sampled}.{png,pdf} and, with --full,
#   figures/science_fig{2_same_task,3_cross_task,4_cross_domain,8_pairing_per_task,6_label_noise_per_task}.{png,pdf,csv}
#   and figures/science_per_task.csv (the per-task gain ratios); a report that lacks a result the stored one holds (the
#   default run's, beside the stored --full one) stays in runs/experiment-*/report/, compared value by value.
# * The mini grid: every paper figure's runs at toy size (a pipeline check; its numbers are not the science).
# * Runs already complete in runs/ are kept (never overwritten); an interrupted grid resumes where it stopped.
# * Executes nbs/figures.ipynb with papermill; the executed copy goes to runs/figures/figures-<timestamp>.ipynb
#   (executed notebooks never land under nbs/), the figures and tables to figures/.
# * Prints every file it wrote.
set -euo pipefail
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
full=()
for arg in "$@"; do   # read before anything is installed or written
  case "$arg" in
    --full) full=(--full) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "reproduce: unknown argument $arg (valid: --full, -h)" >&2; exit 2 ;;
  esac
done
scale="${SCALE:-mini}"
cd "$(dirname "$0")/.."
repo="$(pwd -P)"
bash tools/setup.sh
# shellcheck disable=SC1091
. tools/env.sh
python -c "import sys; from consistency_amp.core import SCALES
if sys.argv[1] not in SCALES: sys.exit(f'reproduce: SCALE must be one of {\", \".join(SCALES)}; got {sys.argv[1]!r}')" "$scale"

stamp="$(date +%Y%m%d-%H%M%S)"
mkdir -p runs/figures figures
executed="runs/figures/figures-${stamp}.ipynb"
started="runs/figures/.started-${stamp}"
touch "$started"
trap 'rm -f "$started"' EXIT

if [ "$scale" = "mini" ]; then
  # The mini grid is small and one-threaded: it runs beside the experiment at the lowest priority (nice 19), so it
  # fills the cores the experiment leaves idle (its world build, its last job) instead of slowing every job.
  mkdir -p runs/.registry-logs
  grid_log="runs/.registry-logs/launch-${stamp}.log"
  echo "reproduce: training and evaluating the missing runs of the mini grid in the background (log $grid_log)"
  OMP_NUM_THREADS=1 nice -n 19 python -m consistency_amp.grid.registry launch --scale mini --runs-dir "$repo/runs" > "$grid_log" 2>&1 &
  grid=$!
  trap 'rm -f "$started"; kill "$grid" 2>/dev/null || true' EXIT
  echo "reproduce: the miniature experiment (runs in runs/experiment-*/, report in figures/science.*)"
  python -m consistency_amp.science.experiment --runs-dir "$repo/runs" --out-dir "$repo/figures" "${full[@]}"
  if ! wait "$grid"; then tail -n 30 "$grid_log" >&2; echo "reproduce: the mini grid failed (log $grid_log)" >&2; exit 1; fi
  tail -n 3 "$grid_log"
else
  echo "reproduce: the missing $scale-scale runs; run these on your cluster, then run this script again"
  python -m consistency_amp.grid.registry launch --scale "$scale" --runs-dir "$repo/runs" --print ${OMNI3D_ROOT:+--data-root "$OMNI3D_ROOT"}
fi


echo "reproduce: executing nbs/figures.ipynb -> $executed"
papermill -k python3 --cwd "$repo/nbs" nbs/figures.ipynb "$executed" \
  -p out_dir "$repo/figures" -p runs_dir "$repo/runs" -p scale "$scale"

python tools/make_readme.py   # the README's first-screen paragraph is generated from figures/science.csv
echo "reproduce: executed notebook $repo/$executed"
echo "reproduce: wrote"
find figures README.md -type f -newer "$started" -print | sort | sed "s|^|  $repo/|"
