#!/usr/bin/env bash
# Pack vLLM 0.26.0 and the Python packages it imports that the lent GPU machines lack, for carrying there in parts.
#
# Why: the machines have no vLLM and no network; a call carries at most 64 MiB (working tree included, ~25 MB), and
# vLLM's wheel alone is 290 MB. vLLM 0.26.0 is the release pinned to the machines' torch 2.11.0 (CUDA 13), within
# TRL 1.16's supported range (0.22-0.31). benchmarks/vllm_device_requirements.txt lists vLLM and its import-time
# closure minus what the machines already hold (KINDS.md's list; torch, triton, torchvision and the nvidia-* libraries
# stay theirs), resolved by pip for Python 3.12. The packages are installed for Python 3.12 into one folder, packed
# with xz (~238 MB at -9e: the wheels' deflate leaves much to xz) and split into parts that each fit one call beside the tree.
#
#   bash tools/pack_vllm_for_device.sh          # ~5 min on 2 cores; writes .vllm/ (git-ignored)
#   bash tools/pack_vllm_for_device.sh --check  # before a GPU session: does each packed part still fit beside the tree
#                                               # as it is now (the tree grows from session to session)? exit 1 if not
#   bash tools/pack_vllm_for_device.sh --resplit # seconds: the packed archive cut anew for the tree as it is now, its
#                                               # sum checked first; no download, no xz (what --check asks for, mostly)
# Then, on the device, one call per part and a last one: benchmarks/README.md, "vLLM on the GPU, in parts".
set -euo pipefail
cd "$(dirname "$0")/.."
for ignored in /.vllm/ /.vllm.new/; do grep -qx "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude; done
# a call carries the tree (tracked and untracked-unignored files) and one part: each part fills what 64 MiB leaves,
# less 2 MiB of slack (with a 25.3 MB tree: 6 parts of 39.7 MB at xz -9e, where -6 and 38 MB parts made 7; with
# transformers 5.22.2 added in session 25 and a 25.4 MB tree: 7, the last of 3.1 MB)
TREE_BYTES=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {s += $1} END {print s}')
PART_BYTES=${PART_BYTES:-$(( 64 * 1024 * 1024 - TREE_BYTES - 2 * 1024 * 1024 ))}
if [ "${1:-}" = "--check" ]; then
  [ -d .vllm ] || { echo "pack_vllm_for_device --check: no .vllm/: pack first"; exit 1; }
  LARGEST=$(find .vllm -name 'part_*' -printf '%s\n' | sort -n | tail -1)
  LEFT=$(( 64 * 1024 * 1024 - TREE_BYTES - LARGEST ))
  echo "pack_vllm_for_device --check: tree $TREE_BYTES bytes + largest part $LARGEST = $(( TREE_BYTES + LARGEST )) of 67108864 (64 MiB); $LEFT left"
  [ "$LEFT" -gt 0 ] || { echo "the parts no longer fit beside the tree: repack (bash tools/pack_vllm_for_device.sh)"; exit 1; }
  exit 0
fi
# the fewest parts of at most PART_BYTES, all of one size: the same number of calls as parts filled to the brim, and
# the slack (what the tree may still grow before a repack) spread over every part instead of left to the last one
cut_in_parts() {
  local dir=$1 total count each
  total=$(stat -c %s "$dir/site.tar.xz")
  count=$(( (total + PART_BYTES - 1) / PART_BYTES ))
  each=$(( (total + count - 1) / count ))
  split -b "$each" -d -a 2 "$dir/site.tar.xz" "$dir/part_" && rm "$dir/site.tar.xz"
  for part in "$dir"/part_*; do mkdir -p "$dir/p${part##*_}" && mv "$part" "$dir/p${part##*_}/"; done   # a folder each: one carry
}
if [ "${1:-}" = "--resplit" ]; then
  [ -f .vllm/sums/SHA256SUMS ] || { echo "pack_vllm_for_device --resplit: no .vllm/sums/SHA256SUMS: pack first"; exit 1; }
  W=.vllm.new; rm -rf "$W" && mkdir -p "$W" && cp -r .vllm/sums "$W/"
  trap 'echo "pack_vllm_for_device --resplit: failed; .vllm/ is unchanged"; rm -rf "$W"' ERR
  cat $(find .vllm -name 'part_*' | sort) > "$W/site.tar.xz"
  (cd "$W" && sha256sum --quiet -c sums/SHA256SUMS) || { echo "pack_vllm_for_device --resplit: the parts do not add up to the packed sum: repack"; rm -rf "$W"; exit 1; }
  cut_in_parts "$W"
  trap - ERR; rm -rf .vllm && mv "$W" .vllm
  echo "pack_vllm_for_device --resplit: $(ls -d .vllm/p* | wc -l) parts of $(find .vllm -name 'part_00' -printf '%s') bytes (at most $PART_BYTES) beside a tree of $TREE_BYTES"
  exit 0
fi
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_31_x86_64
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64"
# built in .vllm.new and swapped in at the end: a failed download or pack leaves the old parts as they were
W=.vllm.new; rm -rf "$W" && mkdir -p "$W/wheels"
trap 'echo "pack_vllm_for_device: failed; .vllm/ is unchanged"; rm -rf "$W"' ERR
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
  -d $W/wheels -r benchmarks/vllm_device_requirements.txt
python3 -m pip install -q --no-deps --no-compile --no-index --only-binary=:all: --python-version 3.12 --implementation cp \
  $PLATFORMS --target $W/site $W/wheels/*.whl
tar -C $W/site -cf - . | xz -T2 -9e > $W/site.tar.xz   # 238 MB (-6: 250 MB); about 5 minutes on 2 cores
mkdir -p $W/sums && (cd "$W" && sha256sum site.tar.xz > sums/SHA256SUMS && rm -rf site wheels)
cut_in_parts "$W"
trap - ERR; rm -rf .vllm && mv "$W" .vllm
echo "pack_vllm_for_device: $(ls -d .vllm/p* | wc -l) parts (.vllm/p00 ...) of at most $PART_BYTES bytes beside a tree of $TREE_BYTES; $(cat .vllm/sums/SHA256SUMS)"
