"""Eager PyTorch alone: its first backward of a process, then of a second shape (as first_backward.py,
without the library). Run twice, one process each, on the H100 (eager_first_backward.log)."""
import time, torch, torch.nn.functional as F
for m, k, n in ((64, 64, 64), (8192, 4096, 4096)):
    x = torch.randn(m, k, device="cuda", requires_grad=True)
    w = torch.randn(n, k, device="cuda", requires_grad=True)
    b = torch.randn(n, device="cuda", requires_grad=True)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    out = F.relu(F.linear(x, w, b)); torch.cuda.synchronize(); t1 = time.perf_counter()
    out.backward(torch.randn_like(out)); torch.cuda.synchronize(); t2 = time.perf_counter()
    print(f"eager float32 {m}x{k}->{n}: first forward {1e3*(t1-t0):.0f} ms, first backward {1e3*(t2-t1):.0f} ms", flush=True)
