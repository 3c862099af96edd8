"""fused_mlp 8192x1024-4096's backward alone (_fused_mlp_backward, input and parameter gradients),
bfloat16 or DTYPE, on one forward's saved output: CALLS calls; prints each call's ms.
Usage: python backward.py LIBRARY THREADS CALLS [DTYPE]"""
import math, sys, time, torch
torch.ops.load_library(sys.argv[1]); torch.set_num_threads(int(sys.argv[2]))
dt = getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else torch.bfloat16; rows, dims = 8192, [1024, 4096, 1024]
gen = torch.Generator().manual_seed(0)
x = torch.randn(rows, dims[0], generator=gen).to(dt)
go = torch.randn(rows, dims[-1], generator=gen).to(dt)
ws = [(torch.randn(dims[i + 1], dims[i], generator=gen) * math.sqrt(2 / dims[i])).to(dt) for i in range(2)]
bs = [(torch.randn(dims[i + 1], generator=gen) * 0.5).to(dt) for i in range(2)]
H = torch.ops.hypatia
h = H._fused_mlp_forward(x, ws, bs, False)[0]
for i in range(int(sys.argv[3])):
    s = time.perf_counter(); H._fused_mlp_backward(go, x, ws, [h], [True, True], False, True, True)
    print(f"{(time.perf_counter()-s)*1e3:.0f}", end=" ", flush=True)
print()
