#!/usr/bin/env bash
# The rows that missed an issue-5 goal in the last full CPU runs, measured again three times in a
# row by the benchmark itself (eager against hypatia only; the MLP rows that fell under
# --max-call-s 3 in the full run allowed 10 s a call), then summed up by spread.py. From the
# repository root, with build/libhypatia_ops.so built:  docs/perf/cpu-2026-11-24-repeat/run.sh
set -euo pipefail
dir=docs/perf/cpu-2026-11-24-repeat
rows='linear_relu (1024x784->2048|4096x1024->4096|256x256->512) |mlp 8192x1024-4096x2L '
for run in 1 2 3; do
  HYPATIA_OPS_LIBRARY=build/libhypatia_ops.so .venv/bin/python scripts/bench_ops.py --device cpu \
    --dtypes bfloat16,float32 --match "$rows" --skip compile,jit --max-call-s 10 --out "$dir/run$run" \
    >"$dir/run$run.log" 2>&1
done
.venv/bin/python "$dir/spread.py" "$dir"/run{1,2,3}/results.json >"$dir/spread.md"
