"""Where a fused_linear_relu forward+backward's CPU time goes, against eager: torch.profiler's
per-op self time over 20 calls (after 10 warm-up calls), and the forward and backward timed apart.
Environment: LIB (the library), THR, DT, SHAPE=M,K,N."""
import os, statistics, time, warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")
torch.ops.load_library(os.environ["LIB"])
torch.set_num_threads(int(os.environ.get("THR", "1")))
M, K, N = [int(v) for v in os.environ.get("SHAPE", "256,256,512").split(",")]
dt = getattr(torch, os.environ.get("DT", "float32"))
x = torch.randn(M, K, dtype=dt, requires_grad=True)
w = (torch.randn(N, K, dtype=dt) / K**0.5).requires_grad_()
b = torch.randn(N, dtype=dt).requires_grad_()
g = torch.randn(M, N, dtype=dt)
fns = {"eager": lambda: F.relu(F.linear(x, w, b)), "hyp": lambda: torch.ops.hypatia.fused_linear_relu(x, w, b)}
print(f"threads {torch.get_num_threads()} {dt} {M}x{K}->{N}")
for name, fn in fns.items():
    fwd, bwd = [], []
    for i in range(60):
        x.grad = w.grad = b.grad = None
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        out.backward(g)
        t2 = time.perf_counter()
        if i >= 10:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    print(f"{name}: forward median {statistics.median(fwd) * 1e6:.0f} us, backward {statistics.median(bwd) * 1e6:.0f} us")
for name, fn in fns.items():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            x.grad = w.grad = b.grad = None
            fn().backward(g)
    print(name)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
