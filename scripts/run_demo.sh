#!/usr/bin/env bash
# The main job: set up, build, and run the bundled example through the fused ops.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
source "$root/scripts/setup_env.sh"
export HYPATIA_OPS_LIBRARY="${HYPATIA_BUILD_DIR:-$root/build}/libhypatia_ops.so"
"$HYPATIA_PY" "$root/scripts/demo_ops.py"
