"""Why the bench's forward+backward calls take longer than the same calls in graphed_training.py:
does the rotation over input sets (each with its own weights) or torch.compile's turns in the same
rounds cost them host or GPU time? Issue 39's training rows, eager and hypatia timed as
scripts/bench_ops.py times them (time_interleaved, the same budget), with 1 and with 3 input sets,
without and with torch.compile among the competitors; and the host time of a call alone (30 calls
issued with no synchronization, the clock read before the final synchronize).
Usage: python3 docs/perf/h100/input_sets_probe.py [--rows mlp-1024x2,...] [--dtypes bfloat16,float16]"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_ops import Case, compile_fn, eager_fn, hypatia_fn, make_set, step_fn, time_interleaved, timing_budget  # noqa: E402


def host_us(call, n_sets: int, calls: int = 30) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(calls):
        call(i % n_sets)
    host = (time.perf_counter() - t) / calls
    torch.cuda.synchronize()
    return host * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="mlp-1024x2,mlp-256x4")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--sets", default="1,3")
    args = p.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| row | dtype | sets | with compile | eager ms | hypatia ms | hyp/eager | eager host us | hypatia host us |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.rows.split(","):
        for dtype in args.dtypes.split(","):
            case = Case.named(name, dtype)
            gen = torch.Generator("cuda").manual_seed(0)
            counts = [int(n) for n in args.sets.split(",")]
            sets = [make_set(case, "cuda", True, gen) for _ in range(max(counts))]
            fns = {"eager": eager_fn(case), "hypatia": hypatia_fn(case), "compile": compile_fn(case)}
            for n in counts:
                for with_compile in (False, True):
                    calls = {who: step_fn(fn, "fwd+bwd", sets[:n]) for who, fn in fns.items()
                             if with_compile or who != "compile"}
                    ms = time_interleaved({who: (call, None) for who, call in calls.items()}, n, "cuda",
                                          timing_budget("cuda", False))
                    host = {who: host_us(calls[who], n) for who in ("eager", "hypatia")}
                    print(f"| {name} | {dtype} | {n} | {'yes' if with_compile else 'no'} | {ms['eager'][0]:.3f} | "
                          f"{ms['hypatia'][0]:.3f} | {ms['eager'][0] / ms['hypatia'][0]:.2f} | {host['eager']:.0f} | "
                          f"{host['hypatia']:.0f} |", flush=True)
            del sets, fns, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
