"""Host time per call (us) of hypatia's forward on host-bound problems, next to its parts' costs
measured alone: a loop of calls, synchronized only at its end (median of 7 loops). With `--loop
NAME SECONDS` it only calls NAME for that long (for a sampling profiler)."""
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402

torch.manual_seed(0)
dev = "cuda"
bf = dict(device=dev, dtype=torch.bfloat16)
hf = dict(device=dev, dtype=torch.float16)
# narrow 2-layer MLP, 65536 x 64, bf16
x = torch.randn(65536, 64, **bf)
ws = [torch.randn(64, 64, **bf) / 8 for _ in range(2)]
bs = [torch.randn(64, **bf) for _ in range(2)]
# linear 1024x784->2048 fp16
xl = torch.randn(1024, 784, **hf)
wl = torch.randn(2048, 784, **hf) / 28
bl = torch.randn(2048, **hf)
tiny = torch.randn(16, device=dev)
mlp_op = torch.ops.hypatia.fused_mlp.default
lin_op = torch.ops.hypatia.fused_linear_relu.default

calls = {
    "mlp 2L hypatia_ops.fused_mlp": lambda: hypatia_ops.fused_mlp(x, ws, bs),
    "mlp 2L torch.ops...default": lambda: mlp_op(x, ws, bs, False),
    "mlp 2L eager": lambda: F.linear(F.relu(F.linear(x, ws[0], bs[0])), ws[1], bs[1]),
    "linear hypatia_ops.fused_linear_relu": lambda: hypatia_ops.fused_linear_relu(xl, wl, bl),
    "linear torch.ops...default": lambda: lin_op(xl, wl, bl),
    "linear _addmm_activation": lambda: torch._addmm_activation(bl, xl, wl.t()),
    "linear F.linear (no relu)": lambda: F.linear(xl, wl, bl),
    "torch.empty 65536x64 bf16": lambda: torch.empty(65536, 64, **bf),
    "torch.relu(tiny)": lambda: torch.relu(tiny),
    "torch.ops.aten.relu.default(tiny)": lambda: torch.ops.aten.relu.default(tiny),
}


def host_us(fn, iters=2000):
    loops = []
    for _ in range(7):
        fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        loops.append((time.perf_counter() - t) / iters * 1e6)
    return statistics.median(loops)


with torch.no_grad():
    if len(sys.argv) == 4 and sys.argv[1] == "--loop":
        fn, end = calls[sys.argv[2]], time.time() + float(sys.argv[3])
        while time.time() < end:
            for _ in range(1000):
                fn()
            torch.cuda.synchronize()
    else:
        for name, fn in calls.items():
            fn()  # the autotuner's first call
        for r in range(2):
            for name, fn in calls.items():
                print(f"round {r}  {name:40s} {host_us(fn):7.2f} us", flush=True)
