#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on a CPU with AVX-512 BF16 and no AMX:
#   docs/perf/cpu-2026-11-24-bf16-weight-grad/run.sh OLD.so
# OLD.so: the library before the kernel (commit f8b8065); build/libhypatia_ops.so the one with it.
set -euo pipefail
dir=docs/perf/cpu-2026-11-24-bf16-weight-grad
old="$1"
g++ -O2 -std=c++17 -I. -mavx512f -mavx512bw -mavx512vl -mavx512bf16 "$dir/kernel.cpp" ops/cpu/bf16_gemm_avx512.cpp \
  -o /tmp/hypatia-bf16-wgrad
# The kernel and oneDNN's mm, one thread, taking turns.
for round in 1 2; do
  for shape in "8192 4096 1024" "8192 1024 4096" "4096 4096 1024" "1024 2048 784" "1024 1024 1024"; do
    /tmp/hypatia-bf16-wgrad $shape
    .venv/bin/python "$dir/mm.py" 1 $shape
  done
done >"$dir/kernel.log"
# Through each library's backward against eager's mm + sum, 1 and 2 threads.
for threads in 1 2; do
  for lib in old new; do
    so=$([ $lib = old ] && echo "$old" || echo build/libhypatia_ops.so)
    echo "# $lib library, threads $threads"
    .venv/bin/python "$dir/weight_grad.py" "$so" "$threads" 2>&1 | grep -v Warning
  done
done >"$dir/weight_grad.log"
# The benchmark's bfloat16 rows whose backward it serves, each library once.
for lib in old new; do
  so=$([ $lib = old ] && echo "$old" || echo build/libhypatia_ops.so)
  HYPATIA_OPS_LIBRARY=$so .venv/bin/python scripts/bench_ops.py --device cpu --dtypes bfloat16 \
    --match 'linear_relu 4096x1024|mlp 8192' --skip compile,jit --max-call-s 10 \
    --out "$dir/ab-$lib" >"$dir/ab-$lib.log" 2>&1
done
