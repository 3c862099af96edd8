"""Forward+backward calls of one of issue 39's MLPs back to back for a while, as bench_ops.py times
them (torch.autograd.grad w.r.t. input, weights and biases), for a sampling profiler of the host:
    py-spy record --native --format raw -o stacks.txt -- python3 docs/perf/h200/host_profile.py dlrm-bottom 64
At 64 rows the GPU work is negligible, so every sample is host time. Prints the time per call.
Usage: host_profile.py ROW [ROWS] [SECONDS] [eager|hypatia]"""
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)

SHAPES = {"dlrm-bottom": (13, 512, 256, 64), "mlp-256x4": (256,) * 5, "mlp-512x4": (512,) * 5,
          "mlp-1024x2": (1024,) * 3, "mlp-1024x3": (1024,) * 4}
RELU_LAST = {"dlrm-bottom"}


def main():
    name = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    impl = sys.argv[4] if len(sys.argv) > 4 else "hypatia"
    widths, relu_last = SHAPES[name], name in RELU_LAST
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(rows, widths[0], device=dev, dtype=dt, requires_grad=True)
    ws = [(torch.randn(o, i, device=dev, dtype=dt) / i ** 0.5).requires_grad_() for i, o in zip(widths, widths[1:])]
    bs = [(torch.randn(o, device=dev, dtype=dt) * 0.1).requires_grad_() for o in widths[1:]]
    gout = torch.randn(rows, widths[-1], device=dev, dtype=dt)
    leaves = [x] + ws + bs

    def hypatia():
        return torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)

    def eager():
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = F.linear(h, w, b)
            if i + 1 < len(ws) or relu_last:
                h = F.relu(h)
        return h

    fn = hypatia if impl == "hypatia" else eager
    for _ in range(20):
        torch.autograd.grad(fn(), leaves, gout)
    torch.cuda.synchronize()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            torch.autograd.grad(fn(), leaves, gout)
        calls += 100
        torch.cuda.synchronize()
    print(f"{name} {impl} rows={rows}: {(time.perf_counter() - start) / calls * 1e6:.1f} us per fwd+bwd call "
          f"({calls} calls)", flush=True)


if __name__ == "__main__":
    main()
