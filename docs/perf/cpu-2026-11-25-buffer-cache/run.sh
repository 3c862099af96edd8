#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on the 2-core AMD EPYC:
#   docs/perf/cpu-2026-11-25-buffer-cache/run.sh BASE.so
# BASE.so: the library before the cache (866ef10); build/libhypatia_ops.so: with it.
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-buffer-cache
base_so="$1"
run() { .venv/bin/python "$dir/mlp_fb_faults.py" "$@"; }
# fused_mlp 8192x1024-4096 forward+backward: the two libraries and eager taking turns, bfloat16 and
# float32, 1 and 2 threads, three rounds; each line the median of 5 calls.
for dtype in bfloat16 float32; do
  for threads in 1 2; do
    for round in 1 2 3; do
      echo "# $dtype, $threads thread(s), round $round"
      printf "%-7s " base; run "$base_so" "$threads" hyp 5 "$dtype"
      printf "%-7s " cache; run build/libhypatia_ops.so "$threads" hyp 5 "$dtype"
      printf "%-7s " eager; run build/libhypatia_ops.so "$threads" eager 5 "$dtype"
    done
  done
done >"$dir/mlp_fb.log"
