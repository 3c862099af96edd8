#!/usr/bin/env bash
# On the GPU machine (no network, torch in the system python3): build for sm_90, run the
# whole suite, then the benchmarks. Logs and results go to $OUT (the device tool's folder)
# or to docs/perf/latest; commit them under docs/perf/ with the date.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/docs/perf/latest}"
mkdir -p "$out"
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_BUILD_DIR="${HYPATIA_BUILD_DIR:-$root/build-gpu}" PYTHONUNBUFFERED=1
log="$out/gpu_check.log"
{
  echo "# Hypatia Ops GPU check"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
  echo "nvcc: $(nvcc --version | tail -n 1)"
} >"$log"
cat "$log"

bash "$root/scripts/run_tests.sh" -DCMAKE_CUDA_ARCHITECTURES=90 2>&1 | tee -a "$log"
tests_rc=${PIPESTATUS[0]}
echo "tests exit code: $tests_rc" | tee -a "$log"

if [ "${HYPATIA_SKIP_BENCH:-0}" != 1 ] && [ -f "$root/scripts/bench_ops.py" ]; then
  HYPATIA_OPS_LIBRARY="$HYPATIA_BUILD_DIR/libhypatia_ops.so" \
    python3 "$root/scripts/bench_ops.py" --device cuda --out "$out" 2>&1 | tee "$out/bench.log"
fi
exit "$tests_rc"
