exec > >(tee -a "$OUT/dev53.log") 2>&1
# Carry build-gpu/CMakeCache.txt, build-gpu-main (main's kernel, e9274a8-dirty = 5b8f1b0), build-gpu-xq (branch
# layer-backward-xquarters), build-gpu-xqts (branch layer-backward-xq-tmastore: x quarters with dx by TMA stores),
# scripts/.dev_time_steps.py. Commits in each build_info.
echo "# dev53 $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader) torch $(python3 -c 'import torch;print(torch.__version__)')"
source scripts/device_prebuilt.sh
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
grep -h git_commit build-gpu-main/*.json build-gpu-xq/*.json build-gpu-xqts/*.json
echo "## test_layer_backward.py, build-gpu-xqts $(date -u +%T)"
out=$(cd tests/python && HYPATIA_OPS_LIBRARY="$OLDPWD/build-gpu-xqts/libhypatia_ops.so" timeout 120 python3 -m pytest -q -n 14 -p no:cacheprovider --tb=short -x test_layer_backward.py 2>&1 | tail -25)
echo "$out"
passing="build-gpu-main build-gpu-xq"
echo "$out" | grep -qE "^[0-9]+ passed" && ! echo "$out" | grep -q failed && passing="$passing build-gpu-xqts"
echo "## passing: $passing; graphed steps, 2 rounds $(date -u +%T)"
for r in 1 2; do for lib in $passing; do for ig in 0 1; do
  HYPATIA_OPS_LIBRARY="$PWD/$lib/libhypatia_ops.so" timeout 60 python3 scripts/.dev_time_steps.py $lib $ig 65536,262144
done; done; done | tee "$OUT/steps.jsonl"
python3 -c '
import json, collections, sys
total = collections.Counter()
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if r["rows"] >= 65536: total[r["label"]] += r["us"]
for lib, us in sorted(total.items(), key=lambda kv: kv[1]): print(lib, round(us, 1))' "$OUT/steps.jsonl"
left=$((250 - SECONDS))
echo "## GPU test files with xqts, ${left} s left $(date -u +%T)"
if echo "$passing" | grep -q xqts && [ $left -ge 120 ]; then
  (cd tests/python && HYPATIA_OPS_LIBRARY="$OLDPWD/build-gpu-xqts/libhypatia_ops.so" timeout $((left - 10)) python3 -m pytest -q -n 14 -p no:cacheprovider --tb=short test_cuda.py test_mlp_training.py test_autograd.py test_narrow_input_backward.py test_fused_input_grad.py 2>&1 | tail -15)
fi
echo "## done $(date -u +%T)"
