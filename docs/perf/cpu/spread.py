"""Ratios to eager of the same rows over several benchmark runs, against issue 5's goals.

usage: python3 docs/perf/cpu/spread.py RUN/results.json ... > spread.md
"""
import json
import sys

L2_BYTES = 1 << 20  # one core's L2 on the benchmark's EPYC
ITEMSIZE = {"float32": 4, "bfloat16": 2}


def goal(row: dict) -> float:
    """Issue 5: fused_mlp >= 1.15x eager; fused_linear_relu >= 1.0x, and >= 1.1x forward where
    the output exceeds L2."""
    if row["op"] == "mlp":
        return 1.15
    shape = row["shape"]
    out_bytes = shape["M"] * shape["N"] * ITEMSIZE[row["dtype"]]
    return 1.1 if row["mode"] == "fwd" and out_bytes > L2_BYTES else 1.0


def main(paths: list[str]) -> None:
    runs = [json.load(open(p))["rows"] for p in paths]
    keys, by_key = [], {}
    for run, rows in enumerate(runs):
        for row in rows:
            if row["memory_only"] or "eager" not in row["ms"] or "hypatia" not in row["ms"]:
                continue
            key = (row["op"], row["label"], row["dtype"], row["mode"], row["threads"])
            if key not in by_key:
                keys.append(key)
                by_key[key] = [None] * len(runs)
            by_key[key][run] = row
    print(f"Ratios hypatia / eager (eager's ms over hypatia's) in {len(runs)} runs: {', '.join(paths)}\n")
    print("| row | dtype | mode | threads | goal | ratio each run | met | eager ms | hypatia ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in keys:
        rows = [r for r in by_key[key] if r is not None]
        target = goal(rows[0])
        ratios = [r["hypatia_vs_eager"] for r in rows]
        eager = [r["ms"]["eager"] for r in rows]
        hyp = [r["ms"]["hypatia"] for r in rows]
        met = sum(ratio >= target for ratio in ratios)
        op, label, dtype, mode, threads = key
        print(f"| {op} {label} | {dtype} | {mode} | {threads} | {target:.2f} | "
              f"{' / '.join(f'{x:.3f}' for x in ratios)} | {met} of {len(rows)} | "
              f"{min(eager):.4g}–{max(eager):.4g} | {min(hyp):.4g}–{max(hyp):.4g} |")


if __name__ == "__main__":
    main(sys.argv[1:])
