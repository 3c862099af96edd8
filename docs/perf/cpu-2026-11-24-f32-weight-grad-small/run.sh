#!/usr/bin/env bash
# The measurement of this directory, from the repository root, on an AMD CPU with AVX-512:
#   docs/perf/cpu-2026-11-24-f32-weight-grad-small/run.sh FORCED.so
# FORCED.so: the library at 06f0cc6 built with forced.patch (the float32 weight-gradient kernel at
# every size).
set -euo pipefail
dir=docs/perf/cpu-2026-11-24-f32-weight-grad-small
for threads in 1 2; do
  echo "# threads $threads"
  .venv/bin/python "$dir/weight_grad.py" "$1" "$threads" 2>&1 | grep -v Warning
done >"$dir/weight_grad.log"
