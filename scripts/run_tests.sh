#!/usr/bin/env bash
# The whole test suite: sets up, builds, then runs the GoogleTest suite (ctest) and pytest.
# CUDA tests run when a GPU is present and skip otherwise.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" "$@"
source "$root/scripts/setup_env.sh"
build="${HYPATIA_BUILD_DIR:-$root/build}"
export HYPATIA_OPS_LIBRARY="$build/libhypatia_ops.so" HYPATIA_BUILD_DIR="$build"
status=0
(cd "$build" && ctest --output-on-failure --timeout 600) || status=1
(cd "$root" && "$HYPATIA_PY" -m pytest -p no:cacheprovider -q -rs --durations=20 tests/python) || status=1
exit $status
