#!/usr/bin/env bash
# On the GPU machine: every CUDA benchmark row of issue 4 at one commit, in one session of one
# machine, with the cuBLASLt autotuner's log. `exp.sh linear` builds (gpu_check.sh build), times the
# fused_linear_relu rows, then runs the bundled models end to end; `exp.sh mlp` times the MLP rows.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
part="${1:?linear or mlp}"
bash "$root/scripts/gpu_check.sh" build || exit 1
export HYPATIA_CUBLASLT_LOG=1
OUT="$OUT/$part" bash "$root/scripts/gpu_check.sh" bench --only "$part"
status=$?
if [ "$part" = linear ]; then
  export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_BUILD_DIR="$root/build-gpu"
  bash "$root/scripts/bench_models.sh" cuda >"$OUT/e2e.log" 2>&1 || status=1
fi
exit "$status"
