#!/usr/bin/env bash
# A/B of two library builds on the narrow bfloat16 benchmark rows (fused_linear_relu 65536x64->64,
# fused_mlp 65536x64 x 2 and x 8 layers, forward+backward, 1 and 2 threads), alternating processes:
#   ab.sh OLD.so NEW.so [ROUNDS]   (from the repository root; prints ratios to eager per run)
set -euo pipefail
old="$1" new="$2" rounds="${3:-2}"
for r in $(seq "$rounds"); do
  for which in old new; do
    lib="$old"; [ "$which" = new ] && lib="$new"
    out="$(mktemp -d)"
    HYPATIA_OPS_LIBRARY="$lib" .venv/bin/python scripts/bench_ops.py --device cpu --threads 1,2 --dtypes bfloat16 \
      --match '65536x64' --skip compile,jit --out "$out" >/dev/null 2>&1
    python3 - "$which" "$r" "$out/results.json" <<'PY'
import json, sys
which, r, path = sys.argv[1:]
for row in json.load(open(path))["rows"]:
    if row["mode"] == "fwd+bwd" and row["status"] == "ok":
        print(f"round {r} {which}: {row['op']:11s} {row['label']:16s} thr {row['threads']}  eager {row['ms']['eager']:7.2f} ms"
              f"  hypatia {row['ms']['hypatia']:7.2f} ms  {row['hypatia_vs_eager']:.3f}x")
PY
    rm -rf "$out"
  done
done
