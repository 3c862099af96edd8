#!/usr/bin/env bash
# On the GPU machine (no network, torch in the system python3):
#   gpu_check.sh [all|build|tests|suite|bench|multi|apps|reliability|frontends|frontends-tests|frontends-bench] [bench_ops.py / bench_frontends.py arguments...]
# build: only the sm_90 build (a device call of its own, so that `tests` on the same warm machine
# fits the device tool's 10 minutes a call: on a fresh H100 machine build + tests took ~10 min);
# tests: build (if not done) and run the whole suite, then the bundled models end to end on CUDA
# (scripts/bench_models.sh); bench: scripts/bench_ops.py --device cuda; all (default): both.
# multi (a machine with two GPUs): build, then the tests that run on cuda:1 while cuda:0 is current, the
# data-parallel training test on both GPUs (NCCL) and its throughput on one GPU and on two.
# frontends-tests: build (if not done), then the torch.compile backend / fuse_exported / AOTInductor
# tests on CUDA; frontends-bench: build (if not done), then scripts/bench_frontends.py --device cuda
# --profile with the remaining arguments; frontends: both. The benchmark writes its files after each
# row; a full run takes two device calls, each with part of the models (--models ...), the second
# merging the first's frontends.json (--merge FILE).
# reliability: build (if not done), the differential fuzzer on CUDA (FUZZ_COUNT programs, default
# 2000), then scripts/sanitize.sh gpu (compute-sanitizer): fuzz-cuda.log, compute-sanitizer-*.log.
# apps: build, then the tests of hypatia-run and hypatia-fuse on CPU and CUDA (inputs, --parallel
# on streams, AOTInductor packages compiled for and run on the GPU, hostile files): apps.log.
# suite: build (if not done), then ctest and the whole pytest suite with 8 workers (pytest-xdist),
# no benchmarks: suite-8-workers.log (failures named as they happen), suite-pytest-verbose.log.
# Set HYPATIA_COMMIT to the commit under test where the copied tree's .git may be stale.
# Logs and results go to $OUT (the device tool's folder), else to the committed current results:
# docs/perf/h100/ (multi: docs/perf/multi-gpu/), which they replace (docs/perf/README.md).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
phase="${1:-all}"
shift || true
default_out="$root/docs/perf/h100"
[ "$phase" = multi ] && default_out="$root/docs/perf/multi-gpu"
[ "$phase" = reliability ] && default_out="$root/docs/reliability"
out="${OUT:-$default_out}"
mkdir -p "$out"
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_BUILD_DIR="${HYPATIA_BUILD_DIR:-$root/build-gpu}" PYTHONUNBUFFERED=1
export HYPATIA_OPS_LIBRARY="$HYPATIA_BUILD_DIR/libhypatia_ops.so"
status=0

# A log's first lines: its title, then the date, commit, GPUs, torch and nvcc.
header() {
  echo "# $1"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${HYPATIA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "gpu: $(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda, " devices:", torch.cuda.device_count())'
  echo "nvcc: $(nvcc --version | tail -n 1)"
}

# The sm_90 build (its log: build.log); the run stops where it fails.
build() {
  bash "$root/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
}
# The build where the library is not there yet (a carried build-gpu/ is used as it is).
build_if_missing() {
  [ -f "$HYPATIA_OPS_LIBRARY" ] || build
}

if [ "$phase" = build ] || [ "$phase" = multi ] || [ "$phase" = apps ]; then
  build
  echo "built $HYPATIA_OPS_LIBRARY"
fi

if [ "$phase" = all ] || [ "$phase" = tests ]; then
  log="$out/gpu_check.log"
  header "Hypatia Ops GPU check" >"$log"
  cat "$log"
  # Eight pytest processes share the GPU (every test checks results, none times, and the tests that
  # need a particular kernel force it): the suite then fits one device call. Serial without pytest-xdist.
  if python3 -c 'import xdist' 2>/dev/null; then export HYPATIA_TEST_WORKERS="${HYPATIA_TEST_WORKERS:-8}"; fi
  bash "$root/scripts/run_tests.sh" -DCMAKE_CUDA_ARCHITECTURES=90 2>&1 | tee -a "$log"
  tests_rc=${PIPESTATUS[0]}
  echo "tests exit code: $tests_rc" | tee -a "$log"
  bash "$root/scripts/bench_models.sh" cuda 2>&1 | tee "$out/e2e.log"
  e2e_rc=${PIPESTATUS[0]}
  [ "$tests_rc" = 0 ] && [ "$e2e_rc" = 0 ] || status=1
fi

if [ "$phase" = suite ]; then
  build_if_missing
  log="$out/suite-8-workers.log"
  header "The whole suite on the GPU: ctest, then pytest with 8 workers (pytest-xdist)" >"$log"
  (cd "$HYPATIA_BUILD_DIR" && ctest --output-on-failure 2>&1) | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  # Every test's result as it comes (suite-pytest-verbose.log), the log keeping all but the passes and
  # skips: a run that the device call's time limit cuts still names what had failed.
  (cd "$root" && python3 -m pytest -v -rs -n 8 --dist loadfile -p no:cacheprovider tests/python 2>&1) |
    tee "$out/suite-pytest-verbose.log" | grep -Ev '(PASSED|SKIPPED|XFAIL|XPASS)( +tests/|.*\[ *[0-9]+%\]$)' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  echo "suite: $([ $status = 0 ] && echo passed || echo FAILED)" | tee -a "$log"
fi

if [ "$phase" = multi ]; then
  log="$out/gpu_multi.log"
  header "Hypatia Ops two-GPU check" >"$log"
  # Every device-parametrized test on cuda:1 while cuda:0 is current (ids *cuda1), then the reverse (*cuda0).
  for current in 0 1; do
    echo "== current GPU: cuda:$current" | tee -a "$log"
    # 8 pytest processes: serially one half took 5.5 min on two H200s (2026-11-27), both halves overran a call.
    workers=()
    python3 -c 'import xdist' 2>/dev/null && workers=(-n 8 --dist loadfile)
    (cd "$root" && HYPATIA_TEST_CURRENT_GPU=$current python3 -m pytest -q -rs ${workers[@]+"${workers[@]}"} tests/python \
      -k "cuda1 or cuda0 or non_default_device or mixed_devices or both_gpus or run_errors or ddp" 2>&1) | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
  # The data-parallel training step's throughput, fused against unfused, on one GPU and on two.
  for n in 1 2; do
    python3 -m torch.distributed.run --standalone --nproc-per-node "$n" "$root/scripts/ddp_train.py" --device cuda \
      --dtype bfloat16 --bench --steps 20 --widths 1024,4096,4096,1024 --batch 8192 --json "$out/ddp_bench_${n}gpu.json" 2>&1 \
      | grep -E "^ddp bench|Error" | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi

if [ "${phase#frontends}" != "$phase" ]; then
  build_if_missing
  if [ "$phase" != frontends-bench ]; then
    log="$out/frontends_tests.log"
    header "Hypatia Ops front ends (torch.compile backend, fuse_exported, AOTInductor) on CUDA" >"$log"
    (cd "$root" && python3 -m pytest -q -rs --durations=10 tests/python/test_compile_backend.py tests/python/test_export.py 2>&1) \
      | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  fi
  if [ "$phase" != frontends-tests ]; then
    python3 "$root/scripts/bench_frontends.py" --device cuda --profile --out "$out" "$@" 2>&1 | tee "$out/frontends_bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  fi
fi

if [ "$phase" = apps ]; then
  log="$out/apps.log"
  header "Hypatia Ops apps: hypatia-run (inputs, --parallel, .pt2 packages) and hostile files" >"$log"
  (cd "$root" && python3 -m pytest -q -rs --durations=10 tests/python/test_run_inputs.py tests/python/test_aoti_package.py \
    tests/python/test_hostile_files.py tests/python/test_models_app.py 2>&1) | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if [ "$phase" = reliability ]; then
  # The differential fuzzer on CUDA (docs/reliability/fuzz-cuda.log), then compute-sanitizer's four
  # tools over the CUDA GoogleTests and a pytest subset (docs/reliability/compute-sanitizer-*.log).
  build_if_missing
  (cd "$root" && python3 tests/fuzz/fuzz_passes.py --device cuda --count "${FUZZ_COUNT:-2000}" --jobs 8 --quiet 2>&1) \
    | tee "$out/fuzz-cuda.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  bash "$root/scripts/sanitize.sh" gpu "$out" || status=1
fi

if [ "$phase" = all ] || [ "$phase" = bench ]; then
  build_if_missing
  python3 "$root/scripts/bench_ops.py" --device cuda --out "$out" "$@" 2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit "$status"
