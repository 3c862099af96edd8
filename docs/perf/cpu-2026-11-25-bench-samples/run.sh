#!/usr/bin/env bash
# The benchmark's 0.2-2.5 ms rows (linear 256x256->512, float32 and bfloat16, forward and
# forward+backward, 1 and 2 threads) in 5 runs with at most 30 samples a competitor (the old
# default) and 5 with at most 400 (the new one), the two taking turns; then each row's ratios to
# eager over the runs of each. From the repository root, with build/libhypatia_ops.so built:
#   docs/perf/cpu-2026-11-25-bench-samples/run.sh
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-bench-samples
for i in 1 2 3 4 5; do
  for samples in 30 400; do
    out="$dir/samples-$samples/run-$i"
    mkdir -p "$out"
    HYPATIA_OPS_LIBRARY=build/libhypatia_ops.so PYTHONUNBUFFERED=1 .venv/bin/python scripts/bench_ops.py \
      --device cpu --threads 1,2 --only linear --match '256x256->512' --max-samples "$samples" --out "$out" \
      2>&1 | grep '^\[' >"$out/bench.log"
    rm "$out/speedup.png" "$out/results.md"  # results.json holds every number
  done
done
for samples in 30 400; do
  .venv/bin/python docs/perf/cpu-2026-11-24-repeat/spread.py "$dir"/samples-$samples/run-*/results.json \
    >"$dir/spread-$samples.md"
done
