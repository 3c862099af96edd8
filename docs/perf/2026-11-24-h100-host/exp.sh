#!/usr/bin/env bash
# On the GPU machine, after `scripts/gpu_check.sh build`: host time per call of the host-bound
# forwards and of their parts (host_parts.py), then, where perf exists, where the host time goes.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here}"
export HYPATIA_OPS_LIBRARY="${HYPATIA_OPS_LIBRARY:-$here/../../../build-gpu/libhypatia_ops.so}"
python3 "$here/host_parts.py" 2>&1 | tee "$out/host_parts.log"
if command -v perf >/dev/null; then
  for name in "mlp 2L torch.ops...default" "linear torch.ops...default" "linear _addmm_activation"; do
    tag="$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')"
    perf record -F 5000 -g -o "/tmp/$tag.data" python3 "$here/host_parts.py" --loop "$name" 8 >/dev/null 2>&1
    { echo "== $name: self time by library";
      perf report -i "/tmp/$tag.data" --no-children --sort dso --stdio 2>/dev/null | grep '%' | head -15;
      echo "== $name: self time by symbol";
      perf report -i "/tmp/$tag.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep '%' | head -60;
    } >"$out/perf-$tag.log"
    head -20 "$out/perf-$tag.log"
  done
else
  echo "no perf on this machine"
fi
