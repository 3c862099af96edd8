#!/usr/bin/env bash
# The benchmark's bfloat16 linear rows (and the bfloat16 MLP 8192x1024-4096 forward+backward) with the
# library before and after streaming the packed weight, taking turns, two rounds, from the repository
# root:  docs/perf/cpu-2026-11-25-bf16-forward-pack/ab.sh BASE.so NEW.so
# BASE.so: the library at 48363a6; NEW.so: at 8b9b0e7 (non-temporal stores in pack_bf16_weight).
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-bf16-forward-pack
for round in 1 2; do
  for lib in base new; do
    so=$([ $lib = base ] && echo "$1" || echo "$2")
    HYPATIA_OPS_LIBRARY="$so" .venv/bin/python scripts/bench_ops.py --device cpu --threads 1,2 --only linear \
      --dtypes bfloat16 --skip compile,jit --out "$dir/ab/$lib-$round" >"$dir/ab/$lib-$round.log" 2>&1
  done
done
mlp_fb=docs/perf/cpu-2026-11-24-mlp-bf16-profile/mlp_fb.py
for threads in 1 2; do
  for round in 1 2; do
    echo "# threads $threads, round $round"
    for lib in base new; do
      printf "%-5s " "$lib"
      .venv/bin/python "$mlp_fb" "$([ $lib = base ] && echo "$1" || echo "$2")" "$threads" hyp 3 2>&1 | grep -v Warning
    done
    printf "%-5s " eager
    .venv/bin/python "$mlp_fb" "$2" "$threads" eager 3 2>&1 | grep -v Warning
  done
done >"$dir/ab/mlp_fb.log"
