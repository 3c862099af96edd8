"""Times fused_mlp on issue 39's per-layer rows (forward, and forward+backward through
torch.autograd.grad of input, weights and biases) in this process's HYPATIA_CUBLASLT_SEARCH
setting: does the steady-state variant search, which the autotuner runs only where a call takes
>= 0.05 ms, pick faster GEMMs on the shorter ones? Prints the median of 7 bursts of 20 calls, µs.
Usage: search_probe.py [ROW ...]"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401

ROWS = {"mlp-1024x2": (8192, [1024] * 3, False), "mlp-512x4": (32768, [512] * 5, False),
        "dlrm-top": (65536, [512, 1024, 1024, 512, 256, 1], False)}


def median_us(fn, calls=20, bursts=7):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(bursts):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls * 1000)
    return sorted(times)[bursts // 2]


for name in sys.argv[1:] or list(ROWS):
    rows, widths, relu_last = ROWS[name]
    for dtype in (torch.bfloat16, torch.float16):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(rows, widths[0], device="cuda", dtype=dtype, generator=g).requires_grad_()
        ws = [(torch.randn(o, i, device="cuda", dtype=dtype, generator=g) / i**0.5).requires_grad_()
              for i, o in zip(widths, widths[1:])]
        bs = [torch.randn(o, device="cuda", dtype=dtype, generator=g).requires_grad_() for o in widths[1:]]
        gout = torch.randn(rows, widths[-1], device="cuda", dtype=dtype, generator=g)
        with torch.no_grad():
            fwd = median_us(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last))
        step = lambda: torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), [x, *ws, *bs], gout)  # noqa: E731
        fwdbwd = median_us(step)
        print(f"{name} {str(dtype)[6:]} search={os.environ.get('HYPATIA_CUBLASLT_SEARCH', '')!r}: "
              f"fwd {fwd:.1f} us, fwd+bwd {fwdbwd:.1f} us", flush=True)
