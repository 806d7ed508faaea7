#!/usr/bin/env bash
# Download, for the lent GPU machines, the wheels of the libraries whose versions must match the CPU environment's.
#
# Why: the machines have Python 3.12, their own torch 2.11 (CUDA 13), accelerate and numpy, and no network; a call
# can only carry files in its working tree (64 MiB in all). Every GPU figure in benchmarks/README.md was measured with
# these libraries at the versions of the project's CPU environment, so the versions are read from this checkout's
# .venv (what the CPU tests ran), never written down twice. The wheels land in .whl/ (git-ignored), which a device
# call carries (`carry [".whl"]`) and installs with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
#
#   bash tools/pack_wheels_for_device.sh           # ~17 MB: transformers, trl, peft, datasets, POT, dill, multiprocess
#   bash tools/pack_wheels_for_device.sh --tests   # ~36 MB: + what nbdev_test and papermill need there (nbdev,
#                                                  # IPython, ipykernel, ...): with the ~26 MB tree, just under 64 MiB
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "pack_wheels_for_device: no $PY; run bash tools/setup.sh first (the versions are read from it)"; exit 2; }
for ignored in /.whl/ /.whl.new/; do grep -qx "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude; done
# the libraries the machines lack or hold at other versions (accelerate 1.15.0 is theirs, as ours)
PACKAGES="transformers trl peft datasets POT dill multiprocess"
case "${1:-}" in   # --tests: session 13's nbdev_test failed on the machine for want of IPython
  "") TESTS="" ;;
  --tests) TESTS=1 ;;
  *) echo "pack_wheels_for_device: unknown argument ${1}; the choices are none or --tests"; exit 2 ;;
esac
pins=$(TESTS=$TESTS "$PY" - $PACKAGES <<'PY'
import os, re, sys
from importlib.metadata import distribution, version, PackageNotFoundError
pins, missing = [], []
for name in sys.argv[1:]:
    try: pins.append(f"{name}=={version(name)}")
    except PackageNotFoundError: missing.append(name)
if missing: sys.exit(f"pack_wheels_for_device: not installed in the CPU environment: {' '.join(missing)}")
if os.environ.get("TESTS"):   # nbdev_test's and papermill's closure as installed here, minus build tools
    norm, seen = lambda n: re.sub(r"[-_.]+", "-", n).lower(), {}
    def walk(name):
        try: d = distribution(name)
        except PackageNotFoundError: return   # an optional or platform-only requirement
        if norm(name) in seen: return
        seen[norm(name)] = d.version
        for r in d.requires or []:
            if "extra ==" not in r: walk(re.split(r"[ ;<>=!~\[(]", r, 1)[0])
    for top in ("nbdev", "papermill", "ipykernel", "nbconvert"): walk(top)
    carried = {norm(p.split("==")[0]) for p in pins}
    pins += [f"{n}=={v}" for n, v in sorted(seen.items()) if n not in carried | {"setuptools", "wheel", "build", "pip"}]
print("\n".join(pins))
PY
)
# POT's 0.9.7 wheel is 33 MB, too much beside the tree in one call: the machines get 0.9.5 (pyproject allows >= 0.9.4;
# every GPU figure so far was measured with it)
pins=$(echo "$pins" | sed 's/^POT==.*/POT==0.9.5/')
# into a new folder first: a failed download (no network, a version PyPI lacks for 3.12) leaves the old .whl/ as it was
rm -rf .whl.new && mkdir -p .whl.new
echo "$pins" > .whl.new/requirements.txt
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl.new -r .whl.new/requirements.txt ||
  { echo "pack_wheels_for_device: pip could not download the wheels above; .whl/ is unchanged"; rm -rf .whl.new; exit 1; }
rm -rf .whl && mv .whl.new .whl
echo "pack_wheels_for_device: $(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1), in .whl/:" $(echo "$pins" | tr '\n' ' ')
