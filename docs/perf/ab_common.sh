# Sourced by the A/B scripts under docs/perf/, on the GPU machine: "old" is old-src.tar in the
# repository root (git archive <old commit>), unpacked to /tmp/hypatia-old; "new" is this tree.
# Starts $OUT/ab.log with the title "$1", the GPU and torch, then builds both for sm_90 at once
# (logs: $OUT/build-old.log, $OUT/build-new.log). Sets root, old and log; exits if a build fails.
# Defines profile_old_and_new.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export HYPATIA_SYSTEM_PYTHON=1 PYTHONUNBUFFERED=1
log="$OUT/ab.log"
old=/tmp/hypatia-old
mkdir -p "$old" && tar -xf "$root/old-src.tar" -C "$old"
{
  echo "# $1, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c 'import torch; print("torch:", torch.__version__, " cuda:", torch.version.cuda)'
} >"$log"
(HYPATIA_BUILD_DIR="$old/build-gpu" bash "$old/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build-old.log" 2>&1) &
HYPATIA_BUILD_DIR="$root/build-gpu" bash "$root/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build-new.log" 2>&1 \
  || { tail -30 "$OUT/build-new.log" >>"$log"; exit 1; }
wait || { tail -30 "$OUT/build-old.log" >>"$log"; exit 1; }

# Kernel times of each shape ("ROWS WIDTHS DTYPE") by scripts/profile_ops.py, on the old build and
# then the new one, in two rounds, into the log.
profile_old_and_new() {
  local round which lib shape rows widths dtype
  for round in 1 2; do
    for which in old new; do
      lib="$root/build-gpu/libhypatia_ops.so"
      [ "$which" = old ] && lib="$old/build-gpu/libhypatia_ops.so"
      echo "## $which, round $round" >>"$log"
      for shape in "$@"; do
        read -r rows widths dtype <<<"$shape"
        HYPATIA_OPS_LIBRARY="$lib" python3 "$root/scripts/profile_ops.py" --rows "$rows" --widths "$widths" --dtype "$dtype" 2>&1 \
          | grep -v "Warning\|_warn_once" | grep -A4 "^== " >>"$log"
      done
    done
  done
}
