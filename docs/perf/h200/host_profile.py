"""Forward+backward calls of one of issue 39's MLPs back to back for a while, as bench_ops.py times
them (torch.autograd.grad w.r.t. input, weights and biases), for a sampling profiler of the host:
    py-spy record --native --format raw -o stacks.txt -- python3 docs/perf/h200/host_profile.py dlrm-bottom 64
At 64 rows the GPU work is negligible, so every sample is host time. Prints the time per call.
"forward" and "backward" call the library's private forward or backward op alone, on the profiled
thread (autograd runs a backward on its device thread, which py-spy samples too rarely).
Usage: host_profile.py ROW [ROWS] [SECONDS] [eager|hypatia|forward|backward]"""
import sys
import time
from types import SimpleNamespace

import torch

from host_parts import make_row, op_calls  # (and the library, which it loads)
from profile_ops import eager_forward  # noqa: E402  (host_parts put scripts/ on the path)


def main():
    name = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    impl = sys.argv[4] if len(sys.argv) > 4 else "hypatia"
    x, ws, bs, gout, relu_last = make_row(name, rows)
    leaves = [x] + ws + bs
    if impl == "eager":
        fn = eager_forward(SimpleNamespace(op="mlp", relu_last=relu_last), x, ws, bs)
    else:
        fn = lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)  # noqa: E731
    step = lambda: torch.autograd.grad(fn(), leaves, gout)  # noqa: E731
    if impl in ("forward", "backward"):
        forward, backward = op_calls(x, ws, bs, gout, relu_last)
        step = forward if impl == "forward" else backward
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            step()
        calls += 100
        torch.cuda.synchronize()
    what = {"forward": "forward op", "backward": "backward op"}.get(impl, "fwd+bwd")
    print(f"{name} {impl} rows={rows}: {(time.perf_counter() - start) / calls * 1e6:.1f} us per {what} call "
          f"({calls} calls)", flush=True)


if __name__ == "__main__":
    main()
