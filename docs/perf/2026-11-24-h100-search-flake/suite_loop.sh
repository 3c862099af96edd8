#!/usr/bin/env bash
# On the GPU machine: the set of tests that 40066ac's failing run had (test_cuda.py,
# test_mlp_training.py, test_cublaslt_search.py, four pytest processes sharing the GPU), run again
# and again until $LOOP_SECONDS (default 480) pass; full output in suite_loop.log.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
bash "$root/scripts/gpu_check.sh" build >/dev/null || exit 1
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so" PYTHONUNBUFFERED=1
log="$OUT/suite_loop.log"
{
  echo "# pytest -n 4 test_cuda.py test_mlp_training.py test_cublaslt_search.py in a loop, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${HYPATIA_COMMIT:-unknown}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
} >"$log"
end=$((SECONDS + ${LOOP_SECONDS:-480}))
round=0
while [ "$SECONDS" -lt "$end" ]; do
  round=$((round + 1))
  echo "=== round $round" >>"$log"
  (cd "$root" && python3 -m pytest -q -n 4 -W ignore::DeprecationWarning tests/python/test_cuda.py \
    tests/python/test_mlp_training.py tests/python/test_cublaslt_search.py) >>"$log" 2>&1
  echo "round $round exit code: $?" >>"$log"
done
