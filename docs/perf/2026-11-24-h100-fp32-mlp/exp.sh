#!/usr/bin/env bash
# On the GPU machine: where the float32 MLP's forward+backward time goes, hypatia's kernels
# beside eager's and torch.compile's (profile_ops.py --compare), with the cuBLASLt autotuner's log.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
bash "$root/scripts/gpu_check.sh" build || exit 1
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so" PYTHONUNBUFFERED=1
log="$OUT/profile.log"
{
  echo "# profile_ops.py --compare, float32 MLPs, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${HYPATIA_COMMIT:-unknown}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
} >"$log"
for shape in "262144 64,64,64,64,64,64,64,64,64" "65536 64,64,64" "262144 64,64,64"; do
  read -r rows widths <<<"$shape"
  HYPATIA_CUBLASLT_LOG=1 python3 "$root/scripts/profile_ops.py" --compare --rows "$rows" --widths "$widths" \
    --dtype float32 2>&1 | grep -v "Warning\|_warn_once" >>"$log"
done
