"""A bfloat16 layer's weight (and bias) gradient: eager's g.t().mm(h) and g.sum(0) against the
library's backward with only the weight and bias requiring grad (fused_mlp, one layer, no ReLU), on
a build with weight-grad-tiles.patch applied (wide layers' gradients by the library's tiles).
Median of 7 calls, the better of two rounds. Usage: python weight_grad.py LIBRARY THREADS"""
import sys, time, torch
torch.ops.load_library(sys.argv[1]); torch.set_num_threads(int(sys.argv[2]))
def med(fn, reps=7):
    fn(); ts=[]
    for _ in range(reps):
        a=time.perf_counter(); fn(); ts.append(time.perf_counter()-a)
    return sorted(ts)[len(ts)//2]*1e3
for m, k, n in [(1024, 784, 2048), (4096, 1024, 4096), (8192, 1024, 4096), (8192, 4096, 1024)]:
    h = torch.randn(m, k).bfloat16(); g = torch.randn(m, n).bfloat16()
    w = (torch.randn(n, k) / k**.5).bfloat16().requires_grad_(); b = torch.randn(n).bfloat16().requires_grad_()
    out = torch.ops.hypatia.fused_mlp(h, [w], [b], False)
    eager = min(med(lambda: (g.t().mm(h), g.sum(0))) for _ in range(2))
    hyp = min(med(lambda: torch.autograd.grad(out, [w, b], g, retain_graph=True)) for _ in range(2))
    print(f"{m}x{k}->{n}: eager mm+sum {eager:.2f} ms  library {hyp:.2f} ms  {eager / hyp:.2f}x  "
          f"({2 * m * n * k / hyp / 1e6:.0f} GFLOP/s)", flush=True)
