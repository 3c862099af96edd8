"""The float32 input gradient grad @ w on the CPU three ways: MKL's mm, oneDNN's inner product
(mkldnn::_linear_pointwise, what ops/cpu/linear_act_cpu.cpp's cpu_input_grad runs) on a contiguous
copy of w.T, and on w.T as a view; ms per call (median of 10 after 2) at 2 threads, and the largest
relative difference to mm. Usage: python3 docs/perf/cpu/onednn_weight_view.py"""
import statistics
import time

import torch


def median_ms(fn, n=10):
    fn()
    fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


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
        ref = ways["mm"]()
        diff = max(((way() - ref).norm() / ref.norm()).item() for way in ways.values())
        ms = {name: median_ms(way) for name, way in ways.items()}
        print(f"| [{m}, {n}] @ [{n}, {k}] | {ms['mm']:.2f} | {ms['copied']:.2f} | {ms['view']:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
