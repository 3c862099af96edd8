#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on an AMD CPU with AVX-512:
#   docs/perf/cpu-2026-11-24-f32-weight-grad/run.sh OLD.so
# OLD.so: the library before the kernel (commit 9b15e23); build/libhypatia_ops.so the one with it.
set -euo pipefail
dir=docs/perf/cpu-2026-11-24-f32-weight-grad
old="$1"
g++ -O2 -std=c++17 -I. -mavx512f "$dir/kernel.cpp" ops/cpu/f32_weight_grad_avx512.cpp -o /tmp/hypatia-f32-wgrad
# The kernel and MKL's mm, one thread, taking turns.
for round in 1 2; do
  for shape in "8192 4096 1024" "8192 1024 4096" "4096 4096 1024" "1024 2048 784"; do
    /tmp/hypatia-f32-wgrad $shape
    .venv/bin/python "$dir/mm.py" 1 $shape
  done
done >"$dir/kernel.log"
# The benchmark's float32 rows whose backward it serves, each library once.
for lib in old new; do
  so=$([ $lib = old ] && echo "$old" || echo build/libhypatia_ops.so)
  HYPATIA_OPS_LIBRARY=$so .venv/bin/python scripts/bench_ops.py --device cpu --dtypes float32 \
    --match 'linear_relu (1024x784|4096x1024)|mlp 8192' --skip compile,jit --max-call-s 10 \
    --out "$dir/ab-$lib" >"$dir/ab-$lib.log" 2>&1
done
