#!/usr/bin/env bash
# The measurements of this directory, from the repository root (build/libhypatia_ops.so at e4803e5):
#   docs/perf/cpu-2026-11-24-mlp-bf16-profile/run.sh
set -euo pipefail
dir=docs/perf/cpu-2026-11-24-mlp-bf16-profile
lib=build/libhypatia_ops.so
run() { .venv/bin/python "$dir/mlp_fb.py" "$lib" 1 "$@" 2>&1 | grep -v -i warn; }
# Where one thread's time goes in hypatia's call: perf samples at 499 Hz over the whole process.
perf record -F 499 -g -o /tmp/hypatia-mlp.data .venv/bin/python "$dir/mlp_fb.py" "$lib" 1 hyp 6 2>&1 \
  | grep -v -i warn >"$dir/perf.log"
perf report -i /tmp/hypatia-mlp.data --no-children --sort symbol -g none --stdio >/tmp/hypatia-mlp.txt 2>/dev/null
grep '%' /tmp/hypatia-mlp.txt | sed -n '1,30p' | cut -c1-120 >>"$dir/perf.log"
echo "# clear_page_erms (zeroing pages at first touch), by caller" >>"$dir/perf.log"
perf report -i /tmp/hypatia-mlp.data --no-children --sort symbol -g caller,0.5,callee --stdio \
  --symbols clear_page_erms >/tmp/hypatia-mlp-faults.txt 2>/dev/null
grep -v '^#' /tmp/hypatia-mlp-faults.txt | grep -v '^ *$' | cut -c1-120 >>"$dir/perf.log"
# The three, taking turns, twice.
for round in 1 2; do for mode in hyp compile eager; do run "$mode" 5; done; done >"$dir/medians.log"
# PyTorch's own switch for huge pages on its CPU allocations, off and on, taking turns.
for round in 1 2; do
  for thp in 0 1; do
    for mode in hyp eager; do echo "THP_MEM_ALLOC_ENABLE=$thp $(THP_MEM_ALLOC_ENABLE=$thp run "$mode" 5)"; done
  done
done >"$dir/thp.log"
