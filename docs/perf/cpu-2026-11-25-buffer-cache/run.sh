#!/usr/bin/env bash
# The measurements of this directory, from the repository root, on the 2-core AMD EPYC:
#   docs/perf/cpu-2026-11-25-buffer-cache/run.sh BASE.so [turns|profile|tunables ...]
# BASE.so: the library before the cache (866ef10); build/libhypatia_ops.so: with it (7ee18e1).
# With no section named, all three.
set -euo pipefail
dir=docs/perf/cpu-2026-11-25-buffer-cache
base_so="$1"
shift
run() { .venv/bin/python "$dir/mlp_fb_faults.py" "$@"; }

# fused_mlp 8192x1024-4096 forward+backward: the two libraries and eager taking turns, bfloat16 and
# float32, 1 and 2 threads, three rounds; each line the median of 5 calls.
turns() {
  for dtype in bfloat16 float32; do
    for threads in 1 2; do
      for round in 1 2 3; do
        echo "# $dtype, $threads thread(s), round $round"
        printf "%-7s " base; run "$base_so" "$threads" hyp 5 "$dtype"
        printf "%-7s " cache; run build/libhypatia_ops.so "$threads" hyp 5 "$dtype"
        printf "%-7s " eager; run build/libhypatia_ops.so "$threads" eager 5 "$dtype"
      done
    done
  done >"$dir/mlp_fb.log"
}

# Where the base library's bfloat16 call spends its time at 1 thread: perf samples at 499 Hz over 8
# calls, the leaf function of each sample counted from the first call to the end (the import and the
# inputs left out).
profile() {
  perf record -F 499 -o /tmp/hypatia-cache.data .venv/bin/python "$dir/mlp_fb_faults.py" "$base_so" 1 hyp 6 \
    >"$dir/profile.log" 2>&1
  perf script -i /tmp/hypatia-cache.data -F time,ip,sym 2>/dev/null | .venv/bin/python "$dir/leaf_share.py" \
    hypatia::ops >>"$dir/profile.log"
}

# glibc told never to map or trim (which only the process can choose), against its default: the base
# library, taking turns, three rounds.
tunables() {
  for round in 1 2 3; do
    echo "# round $round"
    printf "%-8s " default; run "$base_so" 1 hyp 5
    printf "%-8s " no-mmap
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295 run "$base_so" 1 hyp 5
  done >"$dir/tunables.log"
}

sections=("$@")
[ $# -gt 0 ] || sections=(turns profile tunables)
for section in "${sections[@]}"; do "$section"; done
