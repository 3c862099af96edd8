#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on a CPU with AVX-512 BF16:
#   docs/perf/cpu-2026-11-24-bf16-gemm/run.sh FORCED.so
# FORCED.so: the library built with forced.patch's one-line change (the kernel on every row count),
# for rows.py; input_grad.py runs on build/libhypatia_ops.so.
set -euo pipefail
dir=docs/perf/cpu-2026-11-24-bf16-gemm
forced="$1"
g++ -O2 "$dir/peak.cpp" -o /tmp/hypatia-peak && /tmp/hypatia-peak >"$dir/peak.log"
g++ -O2 -std=c++17 -I. -mavx512f -mavx512bw -mavx512vl -mavx512bf16 "$dir/kernel.cpp" ops/cpu/bf16_gemm_avx512.cpp \
  -o /tmp/hypatia-kernel
for shape in "1024 784 2048" "4096 1024 4096" "8192 4096 1024"; do /tmp/hypatia-kernel $shape; done >"$dir/kernel.log"
for threads in 1 2; do
  echo "# threads $threads"
  .venv/bin/python "$dir/rows.py" "$forced" "$threads" 2>&1 | grep -v Warning
done >"$dir/rows.log"
for threads in 1 2; do
  echo "# threads $threads"
  .venv/bin/python "$dir/input_grad.py" build/libhypatia_ops.so "$threads" 2>&1 | grep -v Warning
done >"$dir/input_grad.log"
