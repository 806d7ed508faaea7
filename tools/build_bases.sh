#!/usr/bin/env bash
# Rebuild the shipped spatial bases (issues 8 and 26), consistency_amp.training.spatial_bases.SHIPPED_BASES, from their
# recipes in SPATIAL_BASES (spatial-base-none, the no-ability control, is not shipped: it is built on first use):
#
#   bash tools/build_bases.sh            # every shipped base, one process and one core each, in parallel
#   bash tools/build_bases.sh spatial-base-small
#
# Each build is deterministic and writes consistency_amp/weights/<name>/ (model, processor, recipe, cue edges, log).
# Measured 2026-11-23 on the 2-core CI-like machine: about 23 minutes per base, both at once; spatial-base-calibrated
# (longer stages and a calibration stage) took 3091 s on one core beside other work (2026-11-26).
# A folder that exists is kept and the build stops with an error: delete it first to rebuild (nothing is overwritten).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
[ -f .venv/bin/activate ] && [ -z "${VIRTUAL_ENV:-}" ] && . .venv/bin/activate
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(python -c "from consistency_amp.training.spatial_bases import SHIPPED_BASES; print(*SHIPPED_BASES, sep='\n')")
pids=()
for name in "${names[@]}"; do
  OMP_NUM_THREADS=1 python - "$name" <<'PY' &
import sys, torch
from consistency_amp.training.pretraining import pretrain
from consistency_amp.training.spatial_bases import SHIPPED_DIR, SPATIAL_BASES
name = sys.argv[1]
if name not in SPATIAL_BASES: sys.exit(f"build_bases: unknown base {name!r}; valid choices: {', '.join(SPATIAL_BASES)}")
torch.set_num_threads(1)
print("build_bases: wrote", pretrain(SPATIAL_BASES[name], SHIPPED_DIR / name, progress=sys.stderr.isatty()), flush=True)
PY
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done   # a failed build fails the script
exit $status
