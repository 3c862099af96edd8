"""A float32 layer's weight and bias gradients at small and middling sizes: eager's g.t().mm(h) and
g.sum(0) (MKL's sgemm) against the library's backward with only the weight and bias requiring grad
(fused_mlp, one layer, no ReLU; layers over 256 features wide, which take cpu_weight_grads). Run on
a build with forced.patch, whose float32 weight gradients take the library's AVX-512 kernel at every
size. Eager and library take turns; medians of 15 calls. Usage: python weight_grad.py LIBRARY THREADS"""
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


for m, k, n in [(64, 256, 512), (128, 256, 512), (256, 256, 512), (512, 256, 512), (1024, 256, 512),
                (256, 512, 512), (256, 784, 2048), (512, 784, 2048), (128, 1024, 1024), (512, 1024, 1024)]:
    h = torch.randn(m, k)
    g = torch.randn(m, n)
    w = (torch.randn(n, k) / k**0.5).requires_grad_()
    b = torch.randn(n).requires_grad_()
    out = torch.ops.hypatia.fused_mlp(h, [w], [b], False)
    eager_fn = lambda: (g.t().mm(h), g.sum(0))  # noqa: E731
    lib_fn = lambda: torch.autograd.grad(out, [w, b], g, retain_graph=True)  # noqa: E731
    for _ in range(3):
        eager_fn(), lib_fn()
    eager, lib = [], []
    for _ in range(15):
        eager.append(ms(eager_fn))
        lib.append(ms(lib_fn))
    e, lb = statistics.median(eager), statistics.median(lib)
    print(f"{m}x{k}->{n}: eager mm+sum {e:.3f} ms  library {lb:.3f} ms  {e / lb:.3f}x  "
          f"({2 * m * n * k / lb / 1e6:.0f} GFLOP/s)", flush=True)
