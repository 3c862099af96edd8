"""The float32 input gradient grad @ w on the CPU three ways: MKL's mm, oneDNN's inner product
(mkldnn::_linear_pointwise, what ops/cpu/linear_act_cpu.cpp's cpu_input_grad runs) on a contiguous
copy of w.T, and on w.T as a view; ms per call at 2 threads, timed as scripts/bench_ops.py times its
competitors (time_interleaved: medians of single calls, the three in interleaved rounds), and the
largest relative difference to mm.
Usage: python3 docs/perf/cpu/onednn_weight_view.py"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_ops import rel_error, time_interleaved, timing_budget  # noqa: E402


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    linear = torch.ops.mkldnn._linear_pointwise
    print("| grad [M, N] @ w [N, K] | mm | oneDNN, w.T copied | oneDNN, w.T a view | max rel. diff to mm |")
    print("| --- | --- | --- | --- | --- |")
    for m, n, k in [(2048, 1024, 1024), (2048, 512, 1024), (8192, 4096, 1024), (8192, 1024, 4096)]:
        g, w = torch.randn(m, n), torch.randn(n, k)
        ways = {"mm": lambda: g.mm(w),
                "copied": lambda: linear(g, w.t().contiguous(), None, "none", [], ""),
                "view": lambda: linear(g, w.t(), None, "none", [], "")}
        ref = ways["mm"]().double()
        diff = max(rel_error(way(), ref) for way in ways.values())
        timed = {name: (lambda i, way=way: way(), None) for name, way in ways.items()}
        ms = {name: m for name, (m, _, _) in time_interleaved(timed, 1, "cpu", timing_budget("cpu", False)).items()}
        print(f"| [{m}, {n}] @ [{n}, {k}] | {ms['mm']:.2f} | {ms['copied']:.2f} | {ms['view']:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
