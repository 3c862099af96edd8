"""A bfloat16 input gradient g @ w: eager's aten::mm (oneDNN) against the library's kernel, here run
through fused_mlp's forward on w.T (the same kernel and packing work), one process, median of 20
calls, the better of two rounds. Usage: python input_grad.py LIBRARY THREADS"""
import sys
import time

import torch

torch.ops.load_library(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))


def median_ms(fn, reps=20):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


for n, k in [(64, 64), (128, 128), (256, 256), (512, 256), (256, 512), (2048, 784), (4096, 1024), (1024, 4096)]:
    m = 4096 if n * k > 1 << 16 else 65536
    g, w = torch.randn(m, n).bfloat16(), torch.randn(n, k).bfloat16()
    w_t = w.t().contiguous()
    mm = min(median_ms(lambda: g.mm(w)) for _ in range(2))
    kernel = min(median_ms(lambda: torch.ops.hypatia.fused_mlp(g, [w_t], [None], False)) for _ in range(2))
    print(f"{m}x{n}->{k}: mm {mm:.3f} ms  kernel {kernel:.3f} ms  kernel {mm / kernel:.2f}x mm", flush=True)
