#!/usr/bin/env bash
# The whole test suite: sets up, builds (and the wheel, from the same build tree), then runs the
# GoogleTest suite (ctest) and pytest (tests/python/test_packaging.py installs the wheel).
# CUDA tests run when a GPU is present and skip otherwise. HYPATIA_TEST_WORKERS=N runs pytest in N
# processes, a test file each at a time (needs pytest-xdist; the GPU check uses it to fit the
# device tool's 10 minutes a call).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" "$@"
source "$root/scripts/setup_env.sh"
build="${HYPATIA_BUILD_DIR:-$root/build}"
export HYPATIA_OPS_LIBRARY="$build/libhypatia_ops.so" HYPATIA_BUILD_DIR="$build"
status=0
"$root/scripts/build_wheel.sh" || status=1
(cd "$build" && ctest --output-on-failure --timeout 600) || status=1
workers=()
if [ -n "${HYPATIA_TEST_WORKERS:-}" ]; then
  workers=(-n "$HYPATIA_TEST_WORKERS" --dist loadfile)
fi
(cd "$root" && "$HYPATIA_PY" -m pytest -p no:cacheprovider -q -rs --durations=20 ${workers[@]+"${workers[@]}"} tests/python) || status=1
exit $status
