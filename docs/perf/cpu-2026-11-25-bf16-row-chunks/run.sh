#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on a CPU with AVX-512 BF16 and no AMX:
#   docs/perf/cpu-2026-11-25-bf16-row-chunks/run.sh BEFORE.so [DTYPE OUT_DIR]
# BEFORE.so: the library at c09597f (the per-layer backward); build/libhypatia_ops.so: at 8a85c55
# or later (row chunks). With DTYPE (float32) the same measurements of that dtype into OUT_DIR.
set -euo pipefail
src=docs/perf/cpu-2026-11-25-bf16-row-chunks
dtype="${2:-bfloat16}" dir="${3:-$src}"
before="$1" after=build/libhypatia_ops.so
lib() { [ "$1" = before ] && echo "$before" || echo "$after"; }
# Pages faulted in per call, each library and eager, 1 thread.
for which in before after eager; do
  echo "# $which"
  if [ $which = eager ]; then .venv/bin/python "$src/faults.py" "$after" 1 eager "$dtype"; else .venv/bin/python "$src/faults.py" "$(lib $which)" 1 hyp "$dtype"; fi 2>&1 | grep -v Warning
done >"$dir/faults.log"
# The backward alone, the two libraries taking turns, 1 and 2 threads, three rounds of 8 calls.
for threads in 1 2; do
  for round in 1 2 3; do
    for which in before after; do
      printf "threads %s, round %s, %-6s: " "$threads" "$round" "$which"
      .venv/bin/python "$src/backward.py" "$(lib $which)" "$threads" 8 "$dtype" 2>&1 | grep -v Warning
    done
  done
done >"$dir/backward.log"
# The benchmark's row, forward+backward: both libraries and eager taking turns, three rounds.
mlp_fb=docs/perf/cpu-2026-11-24-mlp-bf16-profile/mlp_fb.py
for threads in 1 2; do
  for round in 1 2 3; do
    echo "# threads $threads, round $round"
    for which in before after; do
      printf "%-6s " "$which"
      .venv/bin/python "$mlp_fb" "$(lib $which)" "$threads" hyp 5 "$dtype" 2>&1 | grep -v Warning
    done
    printf "%-6s " eager
    .venv/bin/python "$mlp_fb" "$after" "$threads" eager 5 "$dtype" 2>&1 | grep -v Warning
  done
done >"$dir/mlp_fb.log"
