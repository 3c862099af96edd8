#!/usr/bin/env bash
# The CPU benchmark on this machine (1 and 2 threads, default shapes) into docs/perf/cpu/, the
# committed current CPU results, which it replaces (or into $HYPATIA_PERF_OUT):
# results.json, results.md, speedup.png and bench.log; then the bundled models end to end in
# hypatia-run (e2e.log). Builds first (incremental). --max-call-s 10 keeps every row of issue 5 in the
# one run: the float32 MLP 8192x1024-4096 forward+backward takes about 5 s a call at 1 thread.
# Extra arguments go to bench_ops.py (after it, so they win), e.g. --only mlp or --dtypes float32.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
source "$root/scripts/setup_env.sh"
out="${HYPATIA_PERF_OUT:-$root/docs/perf/cpu}"
mkdir -p "$out"
HYPATIA_OPS_LIBRARY="${HYPATIA_BUILD_DIR:-$root/build}/libhypatia_ops.so" PYTHONUNBUFFERED=1 \
  "$HYPATIA_PY" "$root/scripts/bench_ops.py" --device cpu --threads 1,2 --max-call-s 10 --out "$out" "$@" 2>&1 | tee "$out/bench.log"
# The bundled models end to end in the C++ app, original vs fused, 1 and 2 threads.
"$root/scripts/bench_models.sh" cpu 1 2 2>&1 | tee "$out/e2e.log"
