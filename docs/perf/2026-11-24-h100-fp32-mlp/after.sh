#!/usr/bin/env bash
# On the GPU machine, after the one-pass ReLU backward and bias sum: build, the kernel's own tests
# (ctest), the per-layer training tests, and the profile of exp.sh's shapes and two more
# (profile-after.log).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
bash "$root/scripts/gpu_check.sh" build || exit 1
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_OPS_LIBRARY="$root/build-gpu/libhypatia_ops.so" PYTHONUNBUFFERED=1
log="$OUT/tests-after.log"
{
  echo "# ctest -R ReluBackwardSums; pytest test_mlp_training.py test_cuda.py test_autograd.py -k cuda, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${HYPATIA_COMMIT:-unknown}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
  ctest --test-dir "$root/build-gpu" -R ReluBackwardSums --output-on-failure 2>&1 | tail -8
  cd "$root" && python3 -m pytest -q -n 4 --dist loadfile tests/python/test_mlp_training.py tests/python/test_cuda.py \
    tests/python/test_autograd.py -k cuda -W ignore::DeprecationWarning 2>&1 | tail -15
} >"$log" 2>&1
log="$OUT/profile-after.log"
{
  echo "# profile_ops.py (hypatia only), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${HYPATIA_COMMIT:-unknown}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
} >"$log"
for shape in "262144 64,64,64,64,64,64,64,64,64 float32 mlp" "65536 64,64,64 float32 mlp" \
  "262144 64,64,64 float32 mlp" "8192 1024,4096,1024 bfloat16 mlp" "65536 64,64 float32 linear_relu"; do
  read -r rows widths dtype op <<<"$shape"
  HYPATIA_CUBLASLT_LOG=1 python3 "$root/scripts/profile_ops.py" --rows "$rows" --widths "$widths" \
    --dtype "$dtype" --op "$op" 2>&1 | grep -v "Warning\|_warn_once" >>"$log"
done
