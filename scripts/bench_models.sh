#!/usr/bin/env bash
# End to end: the bundled models (MLP classifier 784-2048-2048-10, NeRF-style narrow MLP) exported
# as frozen TorchScript, fused by hypatia-fuse, and run original vs fused in the C++ app
# hypatia-run: fused-node counts, median latencies, speed ratio, max difference.
#   bench_models.sh [cpu|cuda] [THREADS...]   (default: cuda when present, else cpu; CPU threads
#   default to ATen's own choice). Expects a built tree (scripts/build.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup_env.sh"
build="${HYPATIA_BUILD_DIR:-$root/build}"
for tool in hypatia-fuse hypatia-run; do
  [ -x "$build/$tool" ] || { echo "bench_models: $build/$tool was not built (scripts/build.sh)" >&2; exit 1; }
done
device="${1:-}"
if [ -z "$device" ]; then
  if "$HYPATIA_PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then device=cuda; else device=cpu; fi
fi
shift || true
threads=("$@")
[ "${#threads[@]}" -gt 0 ] || threads=("")
if [ "$device" = cuda ]; then iters=200; else iters=50; fi

models="$build/demo-models"
"$HYPATIA_PY" "$root/models/export.py" --out "$models" --models mlp_classifier narrow_mlp --variants frozen
# NeRF-style MLPs run on many rays at once: a larger batch for the narrow one.
for spec in mlp_classifier:256 narrow_mlp:4096; do
  name="${spec%%:*}" batch="${spec##*:}"
  "$build/hypatia-fuse" --report "$models/${name}_report.json" "$models/${name}_frozen.pt" "$models/${name}_fused.pt"
  for t in "${threads[@]}"; do
    echo
    echo "=== $name (frozen TorchScript), batch $batch, $device${t:+, $t threads}"
    "$build/hypatia-run" "$models/${name}_frozen.pt" --compare "$models/${name}_fused.pt" \
      --device "$device" --batch "$batch" --iters "$iters" ${t:+--threads "$t"}
  done
done
