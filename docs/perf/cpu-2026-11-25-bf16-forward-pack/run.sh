#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on a CPU with AVX-512 BF16 and no AMX:
#   docs/perf/cpu-2026-11-25-bf16-forward-pack/run.sh VARIANTS.so
# VARIANTS.so: the library at 48363a6 with variants.patch applied (git apply, then build as usual);
# build/libhypatia_ops.so: the library at 48363a6 or later, without it.
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-bf16-forward-pack
variants_so="$1"
src=/tmp/hypatia-forward-pack
rm -rf "$src" && mkdir -p "$src" && git archive 48363a6 ops/cpu | tar -x -C "$src"
(cd "$src" && patch -s -p1 <"$OLDPWD/$dir/variants.patch")
g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -I"$src" "$dir/pack.cpp" \
  "$src/ops/cpu/bf16_gemm_avx512.cpp" -o /tmp/hypatia-pack
for variant in "stores" "prefetch 4" "NT stores" "NT stores, prefetch 4"; do
  echo "# $variant"
  case "$variant" in
    stores) /tmp/hypatia-pack ;;
    "prefetch 4") HYP_PACK_PREFETCH=4 /tmp/hypatia-pack ;;
    "NT stores") HYP_PACK_NT=1 /tmp/hypatia-pack ;;
    *) HYP_PACK_NT=1 HYP_PACK_PREFETCH=4 /tmp/hypatia-pack ;;
  esac
done >"$dir/pack.log"
for round in 1 2 3; do
  for threads in 1 2; do
    .venv/bin/python "$dir/variants.py" "$variants_so" "$threads" 8
  done
done >"$dir/variants.log" 2>&1
for round in 1 2 3; do
  for threads in 1 2; do
    echo "# threads $threads, round $round"
    .venv/bin/python "$dir/order.py" build/libhypatia_ops.so "$threads"
  done
done >"$dir/order.log" 2>&1
