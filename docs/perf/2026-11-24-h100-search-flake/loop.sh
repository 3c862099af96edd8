#!/usr/bin/env bash
# On the GPU machine: is test_cublaslt_search.py::test_variants_match_float64[gradients-float32]
# flaky? Its case script (HYPATIA_CUBLASLT_SEARCH=variants: each problem on the fastest cuBLASLt
# variant, chosen by timing) run over and over, four processes at a time so that timings (and
# choices) vary, until $LOOP_SECONDS (default 420) pass; every run's full output in runs.log, one
# line per run in summary.log. First flips.py, how near zero the case's ReLU inputs come.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
bash "$root/scripts/gpu_check.sh" build || exit 1
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so" PYTHONUNBUFFERED=1
export HYPATIA_DISABLE_NARROW_MLP=1 HYPATIA_CUBLASLT_SEARCH=variants HYPATIA_CUBLASLT_LOG=1
summary="$OUT/summary.log"
{
  echo "# cublaslt_search_cases.py gradients float32 in a loop, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${HYPATIA_COMMIT:-unknown}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
  python3 "$root/docs/perf/2026-11-24-h100-search-flake/flips.py" 2>&1
} >"$summary"
tmp="$(mktemp -d)"
end=$((SECONDS + ${LOOP_SECONDS:-420}))
run=0
while [ "$SECONDS" -lt "$end" ]; do
  for p in 1 2 3 4; do
    (python3 "$root/tests/python/cublaslt_search_cases.py" gradients float32 >"$tmp/$p.log" 2>&1; echo "rc $?" >>"$tmp/$p.log") &
  done
  wait
  for p in 1 2 3 4; do
    run=$((run + 1))
    { echo "=== run $run"; grep -v "Warning\|_warn_once" "$tmp/$p.log"; } >>"$OUT/runs.log"
    # One line: exit code, each problem's choice in order, and the checks' lines.
    echo "run $run: $(grep '^rc ' "$tmp/$p.log") | chosen: $(grep -o 'chosen: [a-z0-9]*' "$tmp/$p.log" | cut -d' ' -f2 | tr '\n' ' ')| $(grep -h '^gradients\|Error' "$tmp/$p.log" | tr '\n' ' ')" >>"$summary"
  done
done
echo "runs: $run, failed: $(grep -c ': rc [1-9]' "$summary")" >>"$summary"
