"""fused_mlp 8192x1024-4096 (or eager's MLP), bfloat16 or DTYPE: four forward+backward calls, each with
the MiB of pages that its forward and its backward faulted in (minor faults, getrusage) and its time.
Usage: python faults.py LIBRARY THREADS hyp|eager [DTYPE]"""
import math, resource, sys, time, torch
torch.ops.load_library(sys.argv[1]); torch.set_num_threads(int(sys.argv[2]))
dt = getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else torch.bfloat16; rows, dims = 8192, [1024, 4096, 1024]
gen = torch.Generator().manual_seed(0)
x = torch.randn(rows, dims[0], generator=gen).to(dt).requires_grad_()
go = torch.randn(rows, dims[-1], generator=gen).to(dt)
ws = [(torch.randn(dims[i + 1], dims[i], generator=gen) * math.sqrt(2 / dims[i])).to(dt).requires_grad_() for i in range(2)]
bs = [(torch.randn(dims[i + 1], generator=gen) * 0.5).to(dt).requires_grad_() for i in range(2)]
def eager(x):
    return torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, ws[0], bs[0])), ws[1], bs[1])
fn = {"hyp": lambda x: torch.ops.hypatia.fused_mlp(x, ws, bs, False), "eager": eager}[sys.argv[3]]
for i in range(4):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; s = time.perf_counter()
    y = fn(x); f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.autograd.grad(y, [x] + ws + bs, go); del y
    f2 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(f"fwd {(f1-f0)*4/1024:.0f} MiB faulted, bwd {(f2-f1)*4/1024:.0f} MiB, {(time.perf_counter()-s)*1e3:.0f} ms")
