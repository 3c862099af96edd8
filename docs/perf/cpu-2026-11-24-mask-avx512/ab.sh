#!/usr/bin/env bash
# A/B of two builds of the library on this machine's CPU: fused_linear_relu forward+backward (and
# forward) against eager, min of N calls per round, median of rounds (ab_probe.py), the two
# libraries alternating process by process. Usage: ab.sh LIB_A LIB_B [threads...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${HYPATIA_PY:-python3}"
a="$1" b="$2"; shift 2
threads=("${@:-1}")
"$py" -c 'import torch, platform; print("torch", torch.__version__, "|", platform.processor() or "", open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "))'
for t in "${threads[@]}"; do
  for spec in "float32 256,256,512 fb" "bfloat16 256,256,512 fb" "bfloat16 65536,64,64 fb" "float32 256,256,512 fwd"; do
    read -r dt shape mode <<<"$spec"
    for round in 1 2; do
      for lib in A B; do
        path="$a"; [ "$lib" = B ] && path="$b"
        echo "threads $t $dt $shape $mode $lib: $(LIB="$path" THR="$t" DT="$dt" SHAPE="$shape" MODE="$mode" ROUNDS=9 N=10 "$py" "$here/ab_probe.py")"
      done
    done
  done
done
