#!/usr/bin/env bash
# The main job: set up, build, export the bundled models (MLP classifier 784-2048-2048-10 and
# the NeRF-style narrow MLP), fuse each with hypatia-fuse, run original and fused in hypatia-run
# (CUDA when present, else CPU): fused-node counts, speed ratio, max difference. Then the
# op-level demo (scripts/demo_ops.py): each op against eager PyTorch and a float64 reference.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
source "$root/scripts/setup_env.sh"
build="${HYPATIA_BUILD_DIR:-$root/build}"
export HYPATIA_OPS_LIBRARY="$build/libhypatia_ops.so"
for tool in hypatia-fuse hypatia-run; do
  [ -x "$build/$tool" ] || { echo "run_demo: $build/$tool was not built" >&2; exit 1; }
done

models="$build/demo-models"
"$HYPATIA_PY" "$root/models/export.py" --out "$models" --models mlp_classifier narrow_mlp --variants frozen
if "$HYPATIA_PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  device=cuda; iters=100
else
  device=cpu; iters=20
fi

# NeRF-style MLPs run on many rays at once: a larger batch for the narrow one.
for spec in mlp_classifier:256 narrow_mlp:4096; do
  name="${spec%%:*}" batch="${spec##*:}"
  echo
  echo "=== $name (frozen TorchScript), batch $batch, $device"
  "$build/hypatia-fuse" --report "$models/${name}_report.json" "$models/${name}_frozen.pt" "$models/${name}_fused.pt"
  "$build/hypatia-run" "$models/${name}_frozen.pt" --compare "$models/${name}_fused.pt" \
    --device "$device" --batch "$batch" --iters "$iters"
done

echo
echo "=== op-level demo"
"$HYPATIA_PY" "$root/scripts/demo_ops.py"
