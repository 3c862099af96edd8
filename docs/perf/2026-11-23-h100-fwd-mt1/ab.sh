#!/usr/bin/env bash
# How ab.log was made (2026-11-23, H100): A/B of the narrow MLP forward kernel's tile height at 64
# wide. "new": the tree as it is (mt1.patch: one 16-row block per warp tile, 80 registers, three
# CTAs per SM); "old": the commit before it (two blocks, 32 rows, 128 registers, two CTAs per SM),
# unpacked from old-src.tar (git archive <old commit>). The narrow-MLP tests run on "new", then
# scripts/profile_ops.py (kernel times per forward and forward+backward call) on each,
# alternately, twice. Output: $OUT/ab.log.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../ab_common.sh" "narrow MLP forward tile height A/B"

export HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so"
echo "## tests (new)" >>"$log"
(cd "$root" && python3 -m pytest -q tests/python/test_narrow_mlp.py -k "many_tiles or matches_rounded or one_kernel" 2>&1 | tail -3) >>"$log"

profile_old_and_new "65536 64,64,64 bfloat16" \
  "262144 64,64,64 float16" \
  "262144 64,64,64,64,64 bfloat16" \
  "262144 64,64,64,64,64,64,64,64,64 float16"
