"""fused_linear_relu against eager's F.relu(F.linear(...)) for bfloat16 layers over a range of rows,
with the library's kernel forced on every row count (the build of run.sh), in one process: where
packing the weight on every call pays. Median of `reps` calls, the better of two rounds each.
Usage: python rows.py LIBRARY THREADS"""
import sys
import time

import torch
import torch.nn.functional as F

torch.ops.load_library(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))


def median_ms(fn, reps):
    fn()
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


for k, n in [(64, 64), (256, 512), (784, 2048), (1024, 4096), (4096, 1024)]:
    for m in [8, 32, 128, 512, 2048]:
        x = torch.randn(m, k).bfloat16()
        w, b = (torch.randn(n, k) / k**0.5).bfloat16(), torch.randn(n).bfloat16()
        ref = F.relu(F.linear(x.double(), w.double(), b.double()))
        err = ((torch.ops.hypatia.fused_linear_relu(x, w, b).double() - ref).norm() / ref.norm()).item()
        eager_err = ((F.relu(F.linear(x, w, b)).double() - ref).norm() / ref.norm()).item()
        reps = max(5, min(200, int(2e8 / (m * k * n))))
        hyp = min(median_ms(lambda: torch.ops.hypatia.fused_linear_relu(x, w, b), reps) for _ in range(2))
        eager = min(median_ms(lambda: F.relu(F.linear(x, w, b)), reps) for _ in range(2))
        print(f"{m:5d}x{k}->{n}: hypatia {hyp:.3f} ms  eager {eager:.3f} ms  {eager / hyp:.2f}x  "
              f"error {err:.1e} (eager {eager_err:.1e})", flush=True)
