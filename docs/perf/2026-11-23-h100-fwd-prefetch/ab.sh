#!/usr/bin/env bash
# How ab.log was made (2026-11-23, H100): A/B of the narrow MLP forward kernel on the GPU machine.
# "new": the tree as it is (two tile buffers per warp where they cost no CTA per SM, the next tile
# loading while this one is computed); "old": the commit before it (one buffer, the next tile
# loaded after this one's stores), unpacked from old-src.tar (git archive <old commit>). Both are
# built for sm_90; the CUDA narrow-MLP tests run on "new", then scripts/profile_ops.py (kernel times
# per forward and forward+backward call) on each, alternately, twice. Output: $OUT/ab.log.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../ab_common.sh" "narrow MLP forward A/B"

export HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so"
echo "## tests (new)" >>"$log"
(cd "$root" && python3 -m pytest -q tests/python/test_narrow_mlp.py 2>&1 | tail -5) >>"$log"

profile_old_and_new "65536 64,64,64 bfloat16" \
  "262144 64,64,64 float16" \
  "262144 64,64,64,64,64 bfloat16" \
  "262144 64,64,64,64,64,64,64,64,64 float16" \
  "65536 128,128,128 bfloat16"
