"""fused_linear_relu against eager on the CPU, one library (LIB): MODE=fb forward+backward (grads
reset each call) or fwd (no grad); ROUNDS rounds of N calls, each competitor in turn; prints the
median over rounds of each round's fastest call, and eager / hypatia. THR, DT, SHAPE=M,K,N."""
import os, time, statistics, torch, warnings
warnings.filterwarnings("ignore")
torch.ops.load_library(os.environ.get("LIB","build/libhypatia_ops.so"))
import torch.nn.functional as F
torch.set_num_threads(int(os.environ.get("THR","1")))
M, K, N = [int(v) for v in os.environ.get("SHAPE","256,256,512").split(",")]
dt = getattr(torch, os.environ.get("DT", "float32"))
x = torch.randn(M, K, dtype=dt, requires_grad=True)
w = (torch.randn(N, K, dtype=dt) / K**0.5).requires_grad_()
b = torch.randn(N, dtype=dt).requires_grad_()
g = torch.randn(M, N, dtype=dt)
fns = {"eager": lambda: F.relu(F.linear(x, w, b)), "hyp": lambda: torch.ops.hypatia.fused_linear_relu(x, w, b)}
mode = os.environ.get("MODE", "fb")
res = {k: [] for k in fns}
for r in range(int(os.environ.get("ROUNDS", "15"))):
    for k, fn in fns.items():
        ts = []
        for _ in range(int(os.environ.get("N", "40"))):
            t0 = time.perf_counter()
            if mode == "fb":
                x.grad = w.grad = b.grad = None
                fn().backward(g)
            else:
                with torch.no_grad(): fn()
            ts.append(time.perf_counter() - t0)
        res[k].append(min(ts) * 1e6)
e, h = statistics.median(res["eager"]), statistics.median(res["hyp"])
print("eager %.0f hyp %.0f ratio %.3f" % (e, h, e / h))
