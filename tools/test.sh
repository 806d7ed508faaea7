#!/usr/bin/env bash
# Set up, then run every check CI runs (the README's test command; `.ci/run` calls exactly this).
#   1. the library is in sync with the notebooks (`nbdev_export` leaves no change)
#   2. the notebooks are clean (`nbdev_clean` leaves no change)
#   3. README.md is in sync with nbs/index.ipynb
#   4. `nbdev_test` (cells flagged `slow`/`gpu` are skipped; add them with NBDEV_FLAGS="slow gpu")
#   5. `pytest tests/` (fresh-interpreter imports, papermill runs, bad-input suites), one file per worker,
#      PYTEST_WORKERS of them (default 2; 0 runs them in this process)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
. tools/env.sh

snapshot() { find nbs consistency_amp -type f -not -path '*/__pycache__/*' -not -path '*/.ipynb_checkpoints/*' -print0 | sort -z | xargs -0 sha1sum; }
check_unchanged() {  # $1: what was run; fails if it changed any file
  local after; after=$(snapshot)
  if [ "$before" != "$after" ]; then
    echo "FAIL: '$1' changed files (run it and commit the result):"
    diff <(echo "$before") <(echo "$after") | grep '^[<>]' | awk '{print "   " $3}' | sort -u
    exit 1
  fi
}
before=$(snapshot); nbdev_export; check_unchanged nbdev_export
before=$(snapshot); nbdev_clean; check_unchanged nbdev_clean
python tools/make_readme.py --check
phase() { echo "test.sh: $1 took $((SECONDS - started)) s"; started=$SECONDS; }   # CI must stay under 20 minutes
# torch gives each process one thread per core, so N workers on as many cores spin against each other: nbdev_test took
# 191 s with torch's default and 98 s with one thread per worker (2026-11-28, 2 cores, 2 workers; user time 360 s
# against 173 s). So the cores are shared out among the workers, unless OMP_NUM_THREADS is set already.
cores=$(python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")
threads_per() { local workers=$(( $1 > 1 ? $1 : 1 )); local n=$(( cores / workers )); echo $(( n > 1 ? n : 1 )); }
started=$SECONDS
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(threads_per "${NBDEV_WORKERS:-2}")} \
  nbdev_test --n_workers "${NBDEV_WORKERS:-2}" --timing ${NBDEV_FLAGS:+--flags "$NBDEV_FLAGS"}
phase nbdev_test
# the longest file first (a quarter of the tests' time): loadfile hands files out in order, and started near the end it
# left one worker alone for its last half minute (2026-11-28, 2 cores: 676 and 683 s, then 657 s with it first)
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(threads_per "${PYTEST_WORKERS:-2}")} \
  python -m pytest tests/test_run_faults.py tests/ -q -n "${PYTEST_WORKERS:-2}" --dist loadfile ${PYTEST_ARGS:-}
phase pytest
echo "all checks passed in $SECONDS s"
