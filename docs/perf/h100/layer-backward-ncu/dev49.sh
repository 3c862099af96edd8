exec > >(tee -a "$OUT/dev49.log") 2>&1
# build-gpu-main: main 6a4e82d's library; build-gpu: branch layer-backward-early-free (dx stage freed once its MMAs are done).
echo "# dev49 $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader) torch $(python3 -c 'import torch;print(torch.__version__)')"
source scripts/device_prebuilt.sh
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
echo "## test_layer_backward.py, early-free $(date -u +%T)"
(cd tests/python && timeout 60 python3 -m pytest -q -n 12 -p no:cacheprovider --tb=short test_layer_backward.py 2>&1 | tail -6)
echo "## main vs early-free, 2 rounds $(date -u +%T)"
for r in 1 2; do for lib in build-gpu-main build-gpu; do
  HYPATIA_OPS_LIBRARY="$PWD/$lib/libhypatia_ops.so" timeout 30 python3 scripts/.dev_time_steps.py $lib 1 4096,65536
done; done
echo "## ncu, main's kernel $(date -u +%T)"
HYPATIA_OPS_LIBRARY="$PWD/build-gpu-main/libhypatia_ops.so" timeout 100 ncu --clock-control none --kernel-name regex:layer_backward_kernel --launch-skip 9 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section SourceCounters --import-source no -o "$OUT/layer_backward" \
  python3 scripts/.dev48_target.py > "$OUT/ncu_run.log" 2>&1; echo "ncu rc $?"; tail -3 "$OUT/ncu_run.log"
timeout 30 ncu --import "$OUT/layer_backward.ncu-rep" --print-summary none > "$OUT/ncu_details.txt" 2>&1; echo "details rc $?"
timeout 30 ncu --import "$OUT/layer_backward.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_sass.csv" 2>&1; echo "sass rc $?"
echo "## done $(date -u +%T)"
