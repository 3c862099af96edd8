"""Page faults and time per call of fused_linear_relu against eager F.relu(F.linear), forward (no
grad) and forward+backward, interleaved over ROUNDS rounds of N calls each (minor faults from
getrusage, 4 KiB each). Environment: LIB (the library), THR (default 2), DT (default bfloat16),
SHAPE=M,K,N (default 4096,1024,4096), ROUNDS (default 5), N (default 4)."""
import os, resource, statistics, time, warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")
torch.ops.load_library(os.environ["LIB"])
torch.set_num_threads(int(os.environ.get("THR", "2")))
M, K, N = [int(v) for v in os.environ.get("SHAPE", "4096,1024,4096").split(",")]
dt = getattr(torch, os.environ.get("DT", "bfloat16"))
x = torch.randn(M, K, dtype=dt, requires_grad=True)
w = (torch.randn(N, K, dtype=dt) / K**0.5).requires_grad_()
b = torch.randn(N, dtype=dt).requires_grad_()
g = torch.randn(M, N, dtype=dt)
impls = {"eager": lambda: F.relu(F.linear(x, w, b)), "hypatia": lambda: torch.ops.hypatia.fused_linear_relu(x, w, b)}


def forward(fn):
    with torch.no_grad():
        fn()


calls = {(name, mode): (lambda fn=fn: forward(fn)) if mode == "fwd" else (lambda fn=fn: torch.autograd.grad(fn(), [x, w, b], g))
         for name, fn in impls.items() for mode in ("fwd", "fwd+bwd")}
n = int(os.environ.get("N", "4"))
stats = {key: ([], []) for key in calls}
for r in range(int(os.environ.get("ROUNDS", "5")) + 1):
    for key, call in calls.items():
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(n):
            call()
        if r > 0:  # round 0 warms up
            stats[key][0].append((time.perf_counter() - start) / n)
            stats[key][1].append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / n)
print(f"# {dt} {M}x{K}->{N}, threads {torch.get_num_threads()}, medians of rounds of {n} calls")
for (name, mode), (ts, fs) in stats.items():
    print(f"{name:8s} {mode:8s} {statistics.median(ts) * 1e3:8.1f} ms a call, "
          f"{statistics.median(fs):8.0f} page faults a call ({statistics.median(fs) * 4 / 1024:.1f} MiB)")
