"""fused_mlp 8192x1024-4096 forward+backward (the benchmark's row), bfloat16 or DTYPE, against eager
and torch.compile: 2 warm-up calls, then CALLS timed ones, inputs and output gradients rotating over
3 sets; prints the median. Usage: python mlp_fb.py LIBRARY THREADS hyp|eager|compile CALLS [DTYPE]"""
import math
import statistics
import sys
import time

import torch


def case(dt):
    """The row's 3 (input, output gradient) sets, weights and biases, and eager's MLP over them."""
    rows, dims = 8192, [1024, 4096, 1024]
    gen = torch.Generator().manual_seed(0)
    sets = [(torch.randn(rows, dims[0], generator=gen).to(dt).requires_grad_(),
             torch.randn(rows, dims[-1], generator=gen).to(dt)) for _ in range(3)]
    ws = [(torch.randn(dims[i + 1], dims[i], generator=gen) * math.sqrt(2 / dims[i])).to(dt).requires_grad_()
          for i in range(2)]
    bs = [(torch.randn(dims[i + 1], generator=gen) * 0.5).to(dt).requires_grad_() for i in range(2)]

    def eager(x):
        return torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, ws[0], bs[0])), ws[1], bs[1])

    return sets, ws, bs, eager


if __name__ == "__main__":
    torch.ops.load_library(sys.argv[1])
    torch.set_num_threads(int(sys.argv[2]))
    mode, calls = sys.argv[3], int(sys.argv[4])
    sets, ws, bs, eager = case(getattr(torch, sys.argv[5]) if len(sys.argv) > 5 else torch.bfloat16)
    fn = {"hyp": lambda x: torch.ops.hypatia.fused_mlp(x, ws, bs, False), "eager": eager,
          "compile": torch.compile(eager)}[mode]
    times = []
    for i in range(2 + calls):
        x, grad_out = sets[i % 3]
        start = time.perf_counter()
        torch.autograd.grad(fn(x), [x] + ws + bs, grad_out)
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    print(f"{mode}: {2 + calls} calls, median of the last {calls}: {statistics.median(times):.0f} ms", flush=True)
