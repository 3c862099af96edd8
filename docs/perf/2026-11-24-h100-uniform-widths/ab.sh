#!/usr/bin/env bash
# How ab.log was made (2026-11-24, H100): A/B of the narrow MLP kernels' tile loops with the layer
# widths known at compile time where every layer is as wide as the instance (64 or 128). "new": the
# tree as it is; "old": the commit before it, unpacked from old-src.tar (git archive <old commit>).
# Both are built for sm_90, then scripts/profile_ops.py (kernel times per forward and
# forward+backward call) runs on each, alternately, twice. Output: $OUT/ab.log. (The whole suite
# ran on "new" in the next device call: gpu_check.log.)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../ab_common.sh" "narrow MLP kernels, compile-time uniform widths: A/B"

profile_old_and_new "65536 64,64,64 bfloat16" \
  "262144 64,64,64 float16" \
  "262144 64,64,64,64,64,64,64,64,64 bfloat16" \
  "65536 128,128,128 bfloat16" \
  "65536 32,128,16 bfloat16"
