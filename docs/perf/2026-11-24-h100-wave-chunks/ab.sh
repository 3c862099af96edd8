#!/usr/bin/env bash
# How ab.log was made (2026-11-24, H100): A/B of the narrow MLP backward's chunks of rows. "new":
# the tree as it is (one grid of the backward kernel a chunk); "old": the commit before it (chunks
# of about one output of the widest layer, rounded up to whole grids), unpacked from old-src.tar
# (git archive <old commit>). Both are built for sm_90, then scripts/profile_ops.py (kernel times
# per forward+backward call) runs on each, alternately, twice; then the CUDA training tests and the
# benchmark's narrow 8-layer rows (time and peak memory) on "new". Output: $OUT/ab.log, $OUT/mlp/.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../ab_common.sh" "narrow MLP backward, one grid a chunk: A/B"

profile_old_and_new "262144 64,64,64,64,64,64,64,64,64 bfloat16" \
  "262144 64,64,64,64,64,64,64,64,64 float16" \
  "131072 64,64,64,64,64,64,64,64,64 bfloat16" \
  "65536 64,64,64,64,64,64,64,64,64 bfloat16"

export HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so"
echo "## tests (new)" >>"$log"
(cd "$root" && python3 -m pytest -q -n 4 -p no:cacheprovider tests/python/test_narrow_mlp.py tests/python/test_mlp_training.py \
  -k "cuda or narrow or peak_memory" 2>&1 | tail -3) >>"$log"
mkdir -p "$OUT/mlp"
python3 "$root/scripts/bench_ops.py" --device cuda --out "$OUT/mlp" --only mlp --match 'x64-64x8L (bfloat16|float16)' \
  --baseline "$root/.ref/h100-baseline-2026-11-22.json" >"$OUT/mlp/bench.log" 2>&1
