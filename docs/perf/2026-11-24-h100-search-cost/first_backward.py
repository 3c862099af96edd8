"""Is the first backward's cost per shape or per process? A 64x64->64 fused_linear_relu forward
and backward first, then the 8192x4096->4096 one, each timed (synchronized) on its first call."""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)

dt = getattr(torch, sys.argv[1])
for m, k, n in ((64, 64, 64), (8192, 4096, 4096)):
    x = torch.randn(m, k, device="cuda", dtype=dt, requires_grad=True)
    w = (torch.randn(n, k, device="cuda", dtype=dt) / k**0.5).requires_grad_()
    b = torch.randn(n, device="cuda", dtype=dt, requires_grad=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"{sys.argv[1]} {m}x{k}->{n}: first forward {1e3 * (t1 - t0):.0f} ms, first backward {1e3 * (t2 - t1):.0f} ms",
          flush=True)
