"""A wide bfloat16 layer's weight and bias gradients: eager's g.t().mm(h) and g.sum(0) against the
library's backward with only the weight and bias requiring grad (fused_mlp, one layer, no ReLU).
Eager and library take turns, 7 calls each; medians. Usage: python weight_grad.py LIBRARY THREADS"""
import statistics
import sys
import time

import torch

torch.ops.load_library(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))


def ms(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


for m, k, n in [(1024, 784, 2048), (1024, 1024, 1024), (4096, 1024, 4096), (8192, 1024, 4096), (8192, 4096, 1024)]:
    h = torch.randn(m, k).bfloat16()
    g = torch.randn(m, n).bfloat16()
    w = (torch.randn(n, k) / k**0.5).bfloat16().requires_grad_()
    b = torch.randn(n).bfloat16().requires_grad_()
    out = torch.ops.hypatia.fused_mlp(h, [w], [b], False)
    eager_fn = lambda: (g.t().mm(h), g.sum(0))  # noqa: E731
    lib_fn = lambda: torch.autograd.grad(out, [w, b], g, retain_graph=True)  # noqa: E731
    eager_fn(), lib_fn()
    eager, lib = [], []
    for _ in range(7):
        eager.append(ms(eager_fn))
        lib.append(ms(lib_fn))
    e, lb = statistics.median(eager), statistics.median(lib)
    print(f"{m}x{k}->{n}: eager mm+sum {e:.2f} ms  library {lb:.2f} ms  {e / lb:.3f}x  "
          f"({2 * m * n * k / lb / 1e6:.0f} GFLOP/s)", flush=True)
