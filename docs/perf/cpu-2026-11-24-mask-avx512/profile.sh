#!/usr/bin/env bash
# profile_probe.py on the rows where the A/B (ab.sh) found hypatia behind eager on this CPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${HYPATIA_PY:-python3}"
lib="$1"
for spec in "16 float32 256,256,512" "1 float32 256,256,512" "16 bfloat16 65536,64,64" "1 bfloat16 65536,64,64"; do
  read -r t dt shape <<<"$spec"
  LIB="$lib" THR="$t" DT="$dt" SHAPE="$shape" "$py" "$here/profile_probe.py"
done
