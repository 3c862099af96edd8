#!/usr/bin/env bash
# How this directory was made (2026-11-23, H100), on the GPU machine:
# 1. the whole CUDA benchmark of the tree as it is (scripts/gpu_check.sh bench) into $OUT/bench;
# 2. the experiment: does timing more of cuBLASLt's heuristic candidates than the 8 the autotuner
#    takes find faster GEMMs on the compute-bound linear rows? A build of exp-src.tar (this tree
#    plus candidates.patch: HYPATIA_EXP_CANDIDATES sets how many) runs bench_ops.py on those rows
#    once with 8 and once with 32 candidates, each in a fresh process (a fresh autotune), with
#    HYPATIA_CUBLASLT_LOG=1 (every candidate's time). Output: $OUT/exp.log.
# Both trees are built first, so that no build runs beside a benchmark.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
export HYPATIA_SYSTEM_PYTHON=1 PYTHONUNBUFFERED=1
exp=/tmp/hypatia-exp
mkdir -p "$exp" && tar -xf "$root/exp-src.tar" -C "$exp"
(HYPATIA_BUILD_DIR="$exp/build-gpu" bash "$exp/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >/tmp/build-exp.log 2>&1) &
HYPATIA_BUILD_DIR="$root/build-gpu" bash "$root/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >/tmp/build.log 2>&1 \
  || { tail -30 /tmp/build.log; exit 1; }
wait || { tail -30 /tmp/build-exp.log; exit 1; }

OUT="$OUT/bench" bash "$root/scripts/gpu_check.sh" bench

log="$OUT/exp.log"
{
  echo "# cuBLASLt candidates experiment, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
} >"$log"
for n in 8 32; do
  echo "## HYPATIA_EXP_CANDIDATES=$n" >>"$log"
  HYPATIA_EXP_CANDIDATES=$n HYPATIA_CUBLASLT_LOG=1 HYPATIA_OPS_LIBRARY="$exp/build-gpu/libhypatia_ops.so" \
    python3 "$exp/scripts/bench_ops.py" --device cuda --only linear --dtypes bf16,fp16,tf32 \
    --match '8192x4096|16384x1024' --skip compile --out "/tmp/cand-$n" >"/tmp/cand-$n.log" 2>&1
  grep "hypatia cuBLASLt" "/tmp/cand-$n.log" >>"$log"
  grep "^| [0-9]" "/tmp/cand-$n/results.md" >>"$log"
done
