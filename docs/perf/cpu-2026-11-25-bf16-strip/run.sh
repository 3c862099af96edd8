#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on a CPU with AVX-512 BF16 and no AMX:
#   docs/perf/cpu-2026-11-25-bf16-strip/run.sh BASE.so REGISTERS.so
# BASE.so: the library at dd3fb6f; REGISTERS.so: at 267731a (accumulators in registers);
# build/libhypatia_ops.so: at c09597f or later (the ReLU mask and bias sum in the epilogue).
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-bf16-strip
base_so="$1" registers_so="$2"
base_src=/tmp/hypatia-bf16-strip-base
rm -rf "$base_src" && mkdir -p "$base_src" && git archive dd3fb6f ops/cpu | tar -x -C "$base_src"
flags="-O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512bf16"
g++ $flags -I"$base_src" -DBASE_SIGNATURE "$dir/kernel.cpp" "$base_src/ops/cpu/bf16_gemm_avx512.cpp" -o /tmp/hypatia-strip-base
g++ $flags -I. "$dir/kernel.cpp" ops/cpu/bf16_gemm_avx512.cpp -o /tmp/hypatia-strip-new
# The kernel alone, the two builds taking turns, three rounds.
for round in 1 2 3; do
  for shape in "4096 256 512" "1024 784 2048" "8192 1024 4096" "8192 4096 1024"; do
    for build in base new; do
      echo "# $build, round $round"
      /tmp/hypatia-strip-$build $shape
    done
  done
done >"$dir/kernel.log"
# fused_mlp 8192x1024-4096 bfloat16 forward+backward (the benchmark's row), the three libraries and
# eager taking turns, 1 and 2 threads, two rounds.
mlp_fb=docs/perf/cpu-2026-11-24-mlp-bf16-profile/mlp_fb.py
for threads in 1 2; do
  for round in 1 2; do
    echo "# threads $threads, round $round"
    for lib in base registers new; do
      so=$([ $lib = base ] && echo "$base_so" || { [ $lib = registers ] && echo "$registers_so" || echo build/libhypatia_ops.so; })
      printf "%-10s " "$lib"
      .venv/bin/python "$mlp_fb" "$so" "$threads" hyp 5 2>&1 | grep -v Warning
    done
    printf "%-10s " eager
    .venv/bin/python "$mlp_fb" build/libhypatia_ops.so "$threads" eager 5 2>&1 | grep -v Warning
  done
done >"$dir/mlp_fb.log"
