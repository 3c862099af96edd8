#!/usr/bin/env bash
# On the GPU machine, after `scripts/gpu_check.sh build`: search_cost.py's table (search_cost.log),
# then first_backward.py with the autotuner off and on (first_backward.log).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here}"
export HYPATIA_OPS_LIBRARY="${HYPATIA_OPS_LIBRARY:-$here/../../../build-gpu/libhypatia_ops.so}"
python3 "$here/search_cost.py" 2>&1 | tee "$out/search_cost.log"
for dtype in float32 bfloat16; do
  echo "# HYPATIA_CUBLASLT_AUTOTUNE=0"; HYPATIA_CUBLASLT_AUTOTUNE=0 python3 "$here/first_backward.py" "$dtype"
  echo "# search unset"; python3 "$here/first_backward.py" "$dtype"
done 2>&1 | tee "$out/first_backward.log"
