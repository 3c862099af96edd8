#!/usr/bin/env bash
# How ab-fused.log and ab-ring.log were made (2026-11-23, H100); the committed kernel is neither
# variant exactly, see README.md here. A/B of the narrow MLP backward on the GPU machine: the tree as it is ("new": weight gradients
# summed in the backward kernel where they fit) against the commit before it ("old": the chain
# kernel, then the grouped wgrad kernel), unpacked from old-src.tar (git archive <old commit>).
# Both are built for sm_90; then the CUDA narrow-MLP and training tests run on "new", and
# scripts/profile_ops.py (kernel times) runs on each, alternately, and on "new-unfused"
# (HYPATIA_EXP_NO_FUSE=1: every weight gradient in the second kernel). Output: $OUT/ab.log.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../ab_common.sh" "narrow MLP backward A/B"

export HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so"
echo "## tests (new)" >>"$log"
(cd "$root" && python3 -m pytest -q -x tests/python/test_narrow_mlp.py tests/python/test_mlp_training.py -k "cuda or not cpu" 2>&1 | tail -5) >>"$log"

for round in 1 2; do
  for which in old new new-unfused; do
    lib="$root/build-gpu/libhypatia_ops.so"
    [ "$which" = old ] && lib="$old/build-gpu/libhypatia_ops.so"
    unfused=; [ "$which" = new-unfused ] && unfused=1
    echo "## $which, round $round" >>"$log"
    for shape in "65536 64,64,64 bfloat16" "262144 64,64,64 float16" "262144 64,64,64,64,64,64,64,64,64 float16" \
                 "65536 64,64,64,64,64,64,64,64,64 bfloat16" "65536 128,128,128 bfloat16"; do
      set -- $shape
      HYPATIA_EXP_NO_FUSE=$unfused HYPATIA_OPS_LIBRARY="$lib" python3 "$root/scripts/profile_ops.py" --rows "$1" --widths "$2" --dtype "$3" 2>&1 \
        | grep -v "Warning\|_warn_once" | grep -A4 "fwd+bwd" >>"$log"
    done
  done
done
