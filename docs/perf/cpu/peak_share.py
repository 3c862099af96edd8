"""Each bfloat16 row's time as a share of vdpbf16ps's peak, eager's and the library's, and the share
the library would need for issue 5's goal at eager's time in the same run.

usage: python3 docs/perf/cpu/peak_share.py docs/perf/cpu/results.json > docs/perf/cpu/peak_share.md
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spread import goal  # noqa: E402  (issue 5's goal of a row)

# One core's vdpbf16ps peak on this EPYC, measured (docs/perf/experiments.md#cpu-bf16-gemm-at-every-width).
PEAK_FLOPS_PER_CORE = 234.5e9


def main(path: str) -> None:
    rows = json.load(open(path))["rows"]
    print(f"Share of vdpbf16ps's peak ({PEAK_FLOPS_PER_CORE / 1e9:g} GFLOP/s a core x threads), bfloat16 rows of {path}\n")
    print("| row | mode | threads | goal | ratio to eager | eager | library | the goal needs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if row["dtype"] != "bfloat16" or row["memory_only"] or "hypatia" not in row["ms"]:
            continue
        peak = PEAK_FLOPS_PER_CORE * row["threads"]
        share = lambda ms: row["flops"] / (ms / 1e3) / peak * 100  # noqa: E731
        eager, hyp, target = row["ms"]["eager"], row["ms"]["hypatia"], goal(row)
        print(f"| {row['op']} {row['label']} | {row['mode']} | {row['threads']} | {target:.2f} | "
              f"{eager / hyp:.3f} | {share(eager):.1f}% | {share(hyp):.1f}% | {share(eager / target):.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
