#!/usr/bin/env bash
# The main job: set up, build, then fuse and run the bundled models in the C++ app
# (scripts/bench_models.sh: CUDA when present, else CPU), then the op-level demo
# (scripts/demo_ops.py: each op against eager PyTorch and a float64 reference).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
source "$root/scripts/setup_env.sh"
export HYPATIA_OPS_LIBRARY="${HYPATIA_BUILD_DIR:-$root/build}/libhypatia_ops.so"
"$root/scripts/bench_models.sh"
echo
echo "=== op-level demo"
"$HYPATIA_PY" "$root/scripts/demo_ops.py"
