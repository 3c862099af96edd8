#!/usr/bin/env bash
# On the GPU machine: build lt_search.cu and run it on every problem (lt_search.log).
set -euo pipefail
cd "$(dirname "$0")"
out=${OUT:-.}
nvcc -O2 -std=c++17 -arch=sm_90 lt_search.cu -lcublasLt -lcublas -o "$out/lt_search"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv | tee "$out/lt_search.log"
"$out/lt_search" "$@" 2>&1 | tee -a "$out/lt_search.log"
