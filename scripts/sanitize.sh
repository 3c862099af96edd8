#!/usr/bin/env bash
# The sanitizer runs (docs/reliability/README.md#sanitizers):
#   sanitize.sh cpu [OUT_DIR]   ASan+UBSan build in build-asan (CPU only), ctest, then a pytest subset
#                               with the runtime preloaded into Python: asan-ubsan-cpu.log
#   sanitize.sh tsan [OUT_DIR]  ThreadSanitizer build in build-tsan (CPU only), the concurrency
#                               GoogleTests: tsan-cpu.log
#   sanitize.sh gpu [OUT_DIR]   on a GPU machine: compute-sanitizer memcheck, racecheck, initcheck and
#                               synccheck (the four at once, a log each: compute-sanitizer-TOOL.log)
#                               over the CUDA GoogleTests and a pytest subset, with
#                               PYTORCH_NO_CUDA_MEMORY_CACHING=1; the build is $HYPATIA_BUILD_DIR, else
#                               build-gpu (sm_90, built first if it has no library).
# Logs go to OUT_DIR, else $OUT, else docs/reliability/. Each mode exits non-zero on any report (or
# failed test); each log ends with a summary line. HYPATIA_SANITIZE_PYTEST="..." replaces a mode's
# pytest subset (test ids / files, e.g. to bisect a report).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
out="${2:-${OUT:-$root/docs/reliability}}"
case "$mode" in cpu|tsan|gpu) ;; *) echo "usage: $0 cpu|tsan|gpu [OUT_DIR]" >&2; exit 2 ;; esac
mkdir -p "$out"
out="$(cd "$out" && pwd)"
supp="$root/scripts/sanitizers"
export PYTHONUNBUFFERED=1

header() {  # a log's first lines
  echo "# $1"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${HYPATIA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}$(
    git -C "$root" diff --quiet HEAD -- CMakeLists.txt ops registration passes io apps include tests/cpp 2>/dev/null || echo ' (with uncommitted changes to the sources)')"
  echo "host: $(nproc) cores, $(uname -sr), $(g++ --version | head -n 1)"
  echo "command: bash scripts/sanitize.sh $mode${2:+ $2}"
}

# A step's output as it comes, or (gpu, by_kernel=1) with compute-sanitizer's reports counted by
# kernel, each kernel's first report kept (scripts/sanitizers/by_kernel.py).
by_kernel=0
report_filter() {
  if [ "$by_kernel" = 1 ]; then python3 "$supp/by_kernel.py"; else cat; fi
}

# Runs "$@", its output to the log; fails the mode where it fails.
status=0
step() {
  local title="$1"
  shift
  echo
  echo "## $title"
  echo "\$ $*"
  local started=$SECONDS
  "$@" 2>&1 | report_filter
  local rc=$?
  echo "-> exit $rc, $((SECONDS - started)) s"
  [ "$rc" = 0 ] || status=1
}

# Counts the reports that the runtimes wrote under $1 (log_path=DIR/report), prints them, and fails
# the mode where there is one.
reports_in() {
  local dir="$1" what="$2" count
  count=$(cat "$dir"/report* 2>/dev/null | grep -cE '^(==[0-9]+==)?(ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|SUMMARY: UndefinedBehaviorSanitizer)|: runtime error: ' || true)
  echo
  echo "## reports"
  for f in "$dir"/report*; do
    [ -e "$f" ] && { echo "### $f"; cat "$f"; }
  done
  echo "$what: $count reports"
  [ "$count" = 0 ] || status=1
}

# Configures DIR with SANITIZERS (CPU only, as scripts/build.sh does) and builds TARGETS (default:
# all), at -O1 (ASan's advice; and shorter builds); the output goes to DIR/sanitize-build.log, its tail to the mode's log where it fails.
sanitized_build() {  # DIR SANITIZERS [TARGETS...]
  local dir="$1" sanitizers="$2" generator=()
  shift 2
  mkdir -p "$dir"
  command -v ninja >/dev/null && [ ! -f "$dir/CMakeCache.txt" ] && generator=(-G Ninja)
  { cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX" -DHYPATIA_WITH_CUDA=OFF \
      -DHYPATIA_SANITIZE="$sanitizers" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    && cmake --build "$dir" --parallel "$(nproc)" ${1:+--target "$@"}; } >"$dir/sanitize-build.log" 2>&1 \
    || { tail -40 "$dir/sanitize-build.log"; return 1; }
}

# The CPU pytest subset (ASan makes the CPU kernels some 3-10x slower): every forward test, errors,
# buffer cache, passes, hypatia-run's inputs and the apps on the bundled models; gradchecks and the
# small gradient tests; MLP training at 33 rows. Not test_autograd's CPU bf16 kernel-choice tests,
# whose large shapes take minutes each under ASan.
cpu_subset="${HYPATIA_SANITIZE_PYTEST:-tests/python/test_forward.py tests/python/test_errors.py \
tests/python/test_buffer_cache.py tests/python/test_passes.py tests/python/test_run_inputs.py tests/python/test_models_app.py \
tests/python/test_autograd.py tests/python/test_mlp_training.py tests/python/test_relu_mask.py -k '\
not (test_autograd or test_mlp_training) or (test_training_matches and -33-) or (test_autograd and \
(gradcheck or gradients_match or relu_gradient or only_needed or saves_a_mask or double_backward))'}"

if [ "$mode" = cpu ]; then
  source "$root/scripts/setup_env.sh" || exit 1
  build="$root/build-asan"
  log="$out/asan-ubsan-cpu.log"
  started=$SECONDS
  {
    header "ASan + UBSan, CPU: GoogleTest (ctest) and a pytest subset" "${2:-}"
    # Programs linked with ASan load its runtime first themselves; leaks are checked in them. Set
    # before the build, whose test discovery runs the test programs.
    export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:halt_on_error=1:suppressions=$supp/asan.supp"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
    step "build ($build, -DHYPATIA_SANITIZE=address,undefined)" sanitized_build "$build" address,undefined
    [ $status = 0 ] || { echo "summary: ASan + UBSan: FAILED (build)"; exit 1; }
    step "ctest" bash -c "cd '$build' && ctest -j '$(nproc)' --output-on-failure --timeout 900"
    # Python is not linked with ASan: its runtime must come first in the process, so it is preloaded,
    # with libstdc++ beside it (ASan's __cxa_throw interceptor resolves the real one when the runtime
    # starts; Python does not link libstdc++, so without it every C++ exception aborts the process).
    # Leaks are not checked in Python: CPython and torch keep memory to the end by design.
    # --capture=sys: a report goes to file descriptor 2 as the runtime stops the process, which
    # pytest's default capture would swallow with it.
    LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
    ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS#detect_leaks=1:}" \
    HYPATIA_OPS_LIBRARY="$build/libhypatia_ops.so" HYPATIA_BUILD_DIR="$build" PYTHONWARNINGS=ignore \
      step "pytest subset, runtime preloaded" bash -c "cd '$root' && '$HYPATIA_PY' -m pytest -p no:cacheprovider -q -rs --capture=sys \
        --durations=10 $cpu_subset"
    # The reports are in this log (the runtimes write them to stderr; in a test's subprocess, the
    # test fails and shows them).
    count=$(grep -cE '^(==[0-9]+==)?ERROR: (Address|Leak)Sanitizer|: runtime error: ' "$log.partial" || true)
    echo
    echo "ASan + UBSan: $count reports"
    [ "$count" = 0 ] || status=1
    echo "summary: ASan + UBSan: $( [ $status = 0 ] && echo "0 reports, every test passed" || echo FAILED), $((SECONDS - started)) s"
  } 2>&1 | tee "$log.partial"
  mv "$log.partial" "$log"
  grep -q "^summary: .*0 reports, every test passed" "$log"
  exit $?
fi

if [ "$mode" = tsan ]; then
  source "$root/scripts/setup_env.sh" || exit 1
  build="$root/build-tsan"
  log="$out/tsan-cpu.log"
  reports="$(mktemp -d)"
  started=$SECONDS
  {
    header "ThreadSanitizer, CPU: the concurrency GoogleTests" "${2:-}"
    # libgomp is not instrumented: TSan cannot see its barriers and would report the OpenMP workers'
    # writes as races with the caller's reads after the region. One OpenMP thread keeps every
    # at::parallel_for on its caller (the races under test are between the 16 test threads).
    export OMP_NUM_THREADS=1
    export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:history_size=4:log_path=$reports/report:suppressions=$supp/tsan.supp"
    step "build ($build, -DHYPATIA_SANITIZE=thread)" sanitized_build "$build" thread test_concurrency test_ops
    [ $status = 0 ] || { echo "summary: ThreadSanitizer: FAILED (build)"; exit 1; }
    step "test_concurrency (CPU tests)" "$build/tests/cpp/test_concurrency" --gtest_filter='Concurrency.*'
    step "test_ops (the ops' first calls in this process)" "$build/tests/cpp/test_ops"
    reports_in "$reports" "ThreadSanitizer"
    echo "summary: ThreadSanitizer: $( [ $status = 0 ] && echo "0 reports, every test passed" || echo FAILED), $((SECONDS - started)) s"
  } 2>&1 | tee "$log"
  rm -rf "$reports"
  grep -q "^summary: .*0 reports, every test passed" "$log"
  exit $?
fi

# gpu
export HYPATIA_SYSTEM_PYTHON="${HYPATIA_SYSTEM_PYTHON:-1}"
build="${HYPATIA_BUILD_DIR:-$root/build-gpu}"
if [ ! -f "$build/libhypatia_ops.so" ]; then
  HYPATIA_BUILD_DIR="$build" bash "$root/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/build-gpu.log" 2>&1 \
    || { tail -40 "$out/build-gpu.log"; exit 1; }
fi
source "$root/scripts/setup_env.sh" || exit 1
export HYPATIA_OPS_LIBRARY="$build/libhypatia_ops.so" HYPATIA_BUILD_DIR="$build"
# Every allocation a cudaMalloc of its own, so that the tools see each tensor's bounds and lifetime.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
# Fewer concurrency calls under the tools (10,000 in the normal suite); the pytest subset takes the
# library's kernels untimed where they apply (the skinny kernel too) instead of timing every candidate.
export HYPATIA_TEST_CONCURRENCY_CALLS="${HYPATIA_TEST_CONCURRENCY_CALLS:-320}"
# compute-sanitizer: $COMPUTE_SANITIZER, else on PATH, else in a CUDA toolkit's usual places, else in
# the nvidia-* wheels beside torch.
cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}"
if [ -z "$cs" ]; then
  cs="$(ls -d /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
          /opt/nvidia/*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)"
fi
if [ -z "$cs" ]; then
  cs="$(find "$("$HYPATIA_PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia" \
          -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -n 1)"
fi
[ -n "$cs" ] && [ -x "$cs" ] || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER=PATH)" >&2; exit 1; }
gtests=(
  "$build/tests/cpp/test_cuda_kernels"
  "$build/tests/cpp/test_concurrency --gtest_filter=ConcurrencyCuda.*"
  "$build/tests/cpp/test_ops --gtest_filter=FusedLinearReLU.*:FusedMLP.*"
)
# The pytest subset: the narrow-MLP kernels forward (1000 rows) and in training (5000 rows, bf16), the
# skinny kernel (forced), gradients through both ops, the ReLU-mask backward. Not CUDA graphs: their
# capture needs the caching allocator (a failed capture also leaves the RNG unusable for later tests).
pytest_subset="${HYPATIA_SANITIZE_PYTEST:-tests/python/test_narrow_mlp.py tests/python/test_mlp_training.py \
tests/python/test_cuda.py tests/python/test_autograd.py tests/python/test_relu_mask.py -k '\
(test_matches_rounded_reference_and_eager and mixed-True and 1000) or \
(test_training_matches_rounded_reference_and_eager and cuda and 5000 and mixed and True and dtype2) or \
(test_gradients_match_eager_autograd and cuda) or \
(test_backward_through_the_mask_bits_matches_eager and cuda)'}"

# The subset in HYPATIA_SANITIZE_PYTEST_WORKERS processes (default 4; pytest-xdist, each process a
# summary of its own): in one, initcheck ran 13 of its 20 tests in 545 s on the H100.
pytest_workers="${HYPATIA_SANITIZE_PYTEST_WORKERS:-4}"
pytest_parallel="-p no:xdist"
if [ "$pytest_workers" -gt 1 ] && "$HYPATIA_PY" -c 'import xdist' 2>/dev/null; then
  pytest_parallel="-n $pytest_workers --dist load"
fi

# Each tool's steps share HYPATIA_SANITIZE_GPU_SECONDS (default 480), so that the run fits one device
# call of 10 minutes; a step cut short fails the tool (its log says so).
budget="${HYPATIA_SANITIZE_GPU_SECONDS:-480}"
# Every report printed, without host backtraces, and counted by kernel (HYPATIA_SANITIZE_BY_KERNEL=0:
# the tool's default, the first 100 a process with their backtraces). Capturing the backtraces of
# initcheck's millions of reports took 430 s of its pytest subset; counted, the subset takes 67 s.
by_kernel="${HYPATIA_SANITIZE_BY_KERNEL:-1}"
cs_report_args=""
[ "$by_kernel" = 1 ] && cs_report_args="--print-limit 1000000000 --show-backtrace no"
run_tool() {  # TOOL: every step under it, its log; the log's last line is the tool's total
  local tool="$1" log="$out/compute-sanitizer-$1.log" errors=0 n steps=1 deadline=$((SECONDS + budget))
  left() { echo $((deadline - SECONDS > 1 ? deadline - SECONDS : 1)); }
  {
    header "compute-sanitizer --tool $tool: CUDA GoogleTests and a pytest subset" "${2:-}"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
    echo "compute-sanitizer: $("$cs" --version | tail -n 1)"
    echo "PYTORCH_NO_CUDA_MEMORY_CACHING=1 HYPATIA_TEST_CONCURRENCY_CALLS=$HYPATIA_TEST_CONCURRENCY_CALLS"
    for t in "${gtests[@]}"; do
      # racecheck looks for shared-memory hazards inside a kernel, which host threads do not change, and
      # the 16-thread tests overran 365 s under it on the H100 (even at 32 calls, untimed): not there.
      [ "$tool" = racecheck ] && [ "${t#*test_concurrency}" != "$t" ] && continue
      steps=$((steps + 1))  # each program, and the pytest subset, ends in a summary
      # shellcheck disable=SC2086
      step "$tool: $(basename "${t%% *}")" timeout -k 10 "$(left)" "$cs" --tool "$tool" --error-exitcode 3 $cs_report_args $t
    done
    HYPATIA_CUBLASLT_AUTOTUNE=0 HYPATIA_SKINNY_LINEAR=1 \
      step "$tool: pytest subset" timeout -k 10 "$(left)" bash -c "cd '$root' && '$cs' --tool '$tool' --error-exitcode 3 --target-processes all $cs_report_args \
        '$HYPATIA_PY' -m pytest -p no:cacheprovider -q -rs $pytest_parallel $pytest_subset"
  } >"$log" 2>&1
  # One summary per process the tool watched ("ERROR SUMMARY: N errors"; racecheck's "RACECHECK SUMMARY:
  # H hazards displayed (N errors, W warnings)"; not the "N errors were not printed" line): their total ends the log.
  local counts summaries
  counts=$(sed -n -e 's/^========= ERROR SUMMARY: \([0-9]*\) errors*$/\1/p' \
    -e 's/^========= RACECHECK SUMMARY: .*(\([0-9]*\) errors*, .*/\1/p' "$log")
  for n in $counts; do errors=$((errors + n)); done
  summaries=$(echo "$counts" | grep -c .)
  if [ "$summaries" -lt "$steps" ] || grep -q '^-> exit [1-9]' "$log"; then
    echo "$tool: a step failed or did not finish (see its exit lines)" >>"$log"
    errors=$((errors > 0 ? errors : 1))
  fi
  echo "$tool total over $summaries processes: ERROR SUMMARY: $errors errors" >>"$log"
  [ "$errors" = 0 ]
}

started=$SECONDS
pids=()
tools="${HYPATIA_SANITIZE_GPU_TOOLS:-memcheck racecheck initcheck synccheck}"
for tool in $tools; do
  run_tool "$tool" "${2:-}" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
for tool in $tools; do
  tail -n 1 "$out/compute-sanitizer-$tool.log"
done
echo "compute-sanitizer: $([ $status = 0 ] && echo "0 errors" || echo FAILED), $((SECONDS - started)) s"
exit $status
