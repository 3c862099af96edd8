#!/usr/bin/env bash
# On the GPU machine: A/B of host time per call (host_parts.py) between the tree as it is (B, built
# by `scripts/gpu_check.sh build` into build-gpu) and the same tree without as-rows.patch (A: 2-D
# inputs reshaped to 2-D and their outputs viewed back, as before), in alternating runs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${OUT:-$here}"
base=/tmp/hypatia-base
rm -rf "$base" && mkdir -p "$base"
(cd "$root" && tar --exclude=./build-gpu --exclude=./build --exclude=./.venv -cf - .) | (cd "$base" && tar xf -)
(cd "$base" && patch -R -p1 -s <"$here/as-rows.patch")
HYPATIA_SYSTEM_PYTHON=1 HYPATIA_BUILD_DIR="$base/build-gpu" bash "$base/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/build-base.log" 2>&1
for run in 1 2 3; do
  for variant in A B; do
    lib="$root/build-gpu/libhypatia_ops.so"
    [ "$variant" = A ] && lib="$base/build-gpu/libhypatia_ops.so"
    echo "== run $run variant $variant ($lib)"
    HYPATIA_OPS_LIBRARY="$lib" python3 "$here/host_parts.py" 2>&1 | grep "round 1"
  done
done 2>&1 | tee "$out/ab.log"
