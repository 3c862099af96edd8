#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on a CPU with AVX-512 BF16 and no
# AMX, the library built in build/ (scripts/build.sh):  docs/perf/cpu-2026-11-25-ceiling/run.sh
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-ceiling
flags="-O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512bf16"
g++ $flags docs/perf/cpu-2026-11-24-bf16-gemm/peak.cpp -o /tmp/hypatia-peak
g++ $flags -I. "$dir/gemms.cpp" ops/cpu/bf16_gemm_avx512.cpp -o /tmp/hypatia-gemms
# One core's vdpbf16ps peak today (the median of peak.cpp's three lines), then the six GEMMs alone
# against it, three runs.
/tmp/hypatia-peak | grep vdpbf16ps >"$dir/peak.log"
peak=$(awk '{print $2}' "$dir/peak.log" | sort -n | sed -n 2p)
for run in 1 2 3; do
  echo "# run $run, peak $peak GFLOP/s"
  /tmp/hypatia-gemms "$peak"
done >"$dir/gemms.log"
# The op and eager in phases, taking turns in one process: 1 thread, twice with ATen's default
# allocations and twice with THP_MEM_ALLOC_ENABLE=1 (every ATen allocation of 2 MiB or more advised
# onto huge pages), alternating; then 2 threads.
for run in 1 2; do
  echo "# default pages, run $run"
  .venv/bin/python "$dir/phases.py" build/libhypatia_ops.so 1 7
  echo "# THP_MEM_ALLOC_ENABLE=1, run $run"
  THP_MEM_ALLOC_ENABLE=1 .venv/bin/python "$dir/phases.py" build/libhypatia_ops.so 1 7
done >"$dir/phases.log"
echo "# default pages" >>"$dir/phases.log"
.venv/bin/python "$dir/phases.py" build/libhypatia_ops.so 2 7 >>"$dir/phases.log"
