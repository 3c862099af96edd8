exec > >(tee -a "$OUT/dev50.log") 2>&1
# Carry build-gpu/CMakeCache.txt (for device_prebuilt.sh), build-gpu-main (main's kernel: build of e9274a8-dirty = 5b8f1b0),
# build-gpu-mc (branch layer-backward-multicast f11bf72: clusters of two), build-gpu-mc4 (branch layer-backward-multicast4:
# the group as one cluster of four), build-gpu-xq (branch layer-backward-xquarters: dw split by x's columns, each CTA
# loading g and its quarter of x), build-gpu-xqmc (branch layer-backward-xquarters-mc: the same with g multicast in
# clusters of two), scripts/.dev_time_steps.py. Commits in each build_info. Then LIB=<fastest> for .dev51 and .dev52.
echo "# dev50 $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader) torch $(python3 -c 'import torch;print(torch.__version__)')"
source scripts/device_prebuilt.sh
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
grep -h git_commit build-gpu-main/*.json build-gpu-mc/*.json build-gpu-mc4/*.json build-gpu-xq/*.json build-gpu-xqmc/*.json
passing="build-gpu-main"
for lib in build-gpu-mc build-gpu-mc4 build-gpu-xq build-gpu-xqmc; do
  echo "## test_layer_backward.py, $lib $(date -u +%T)"
  out=$(cd tests/python && HYPATIA_OPS_LIBRARY="$OLDPWD/$lib/libhypatia_ops.so" timeout 120 python3 -m pytest -q -n 14 -p no:cacheprovider --tb=short -x test_layer_backward.py 2>&1 | tail -8)
  echo "$out"
  echo "$out" | grep -qE "^[0-9]+ passed" && ! echo "$out" | grep -q failed && passing="$passing $lib"
done
echo "## passing: $passing; graphed steps, 2 rounds $(date -u +%T)"
for r in 1 2; do for lib in $passing; do for ig in 0 1; do
  HYPATIA_OPS_LIBRARY="$PWD/$lib/libhypatia_ops.so" timeout 60 python3 scripts/.dev_time_steps.py $lib $ig 65536,262144
done; done; done | tee "$OUT/steps.jsonl"
# the fastest library by its summed medians at 65536 and 262144 rows
best=$(python3 -c '
import json, collections, sys
total = collections.Counter()
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if r["rows"] >= 65536: total[r["label"]] += r["us"]
for lib, us in sorted(total.items(), key=lambda kv: kv[1]): print(lib, round(us, 1), file=sys.stderr)
print(min(total, key=total.get))' "$OUT/steps.jsonl")
left=$((545 - SECONDS))
echo "## fastest: $best; GPU test files with it, ${left} s left $(date -u +%T)"
if [ "$best" != build-gpu-main ] && [ $left -ge 290 ]; then
  (cd tests/python && HYPATIA_OPS_LIBRARY="$OLDPWD/$best/libhypatia_ops.so" timeout $left python3 -m pytest -q -n 14 -p no:cacheprovider --tb=short test_cuda.py test_mlp_training.py test_autograd.py test_narrow_input_backward.py test_fused_input_grad.py 2>&1 | tail -15)
fi
echo "## done $(date -u +%T)"
