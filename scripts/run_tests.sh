#!/usr/bin/env bash
# The whole test suite: sets up, builds (and the wheel, from the same build tree), then runs the
# GoogleTest suite (ctest) and pytest (tests/python/test_packaging.py installs the wheel).
# CUDA tests run when a GPU is present and skip otherwise. HYPATIA_TEST_WORKERS=N runs pytest in N
# processes, a test file each at a time (needs pytest-xdist; the GPU check uses it to fit the
# device tool's 10 minutes a call). Without a GPU, the CPU sanitizer jobs follow (below).
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
# Then the CPU sanitizer jobs (docs/reliability/README.md#sanitizers): ASan+UBSan over ctest and a
# pytest subset, ThreadSanitizer over the concurrency tests, each its own build (build-asan,
# build-tsan), logs in $build/sanitize/; any report fails the run. They run where torch sees no GPU
# (CI), so that the GPU suite keeps to one device call; HYPATIA_SANITIZE_JOBS=1|0 forces them on|off.
sanitize="${HYPATIA_SANITIZE_JOBS:-}"
if [ -z "$sanitize" ]; then
  sanitize=$("$HYPATIA_PY" -c 'import torch; print(0 if torch.cuda.is_available() else 1)' 2>/dev/null || echo 1)
fi
if [ "$sanitize" = 1 ]; then
  for job in cpu tsan; do
    started=$SECONDS
    bash "$root/scripts/sanitize.sh" "$job" "$build/sanitize" >/dev/null 2>&1 || status=1
    tail -n 1 "$build/sanitize/$([ $job = cpu ] && echo asan-ubsan-cpu || echo tsan-cpu).log" || true
    echo "sanitize.sh $job: $((SECONDS - started)) s (log: $build/sanitize/)"
  done
fi
exit $status
