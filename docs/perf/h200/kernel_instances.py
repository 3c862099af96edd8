"""Every GPU kernel of one forward+backward of an MLP, in launch order with its own duration
(torch.profiler), where profile_ops.py sums kernels by name. Library: HYPATIA_OPS_LIBRARY.

    python docs/perf/h200/kernel_instances.py 13,512,256,64 --rows 65536 --relu-last
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("widths", help="in_features, then each layer's out_features")
    p.add_argument("--rows", type=int, default=65536)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--relu-last", action="store_true")
    p.add_argument("--calls", type=int, default=3, help="profiled calls; the last is listed")
    args = p.parse_args()
    dims = [int(d) for d in args.widths.split(",")]
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    x = torch.randn(args.rows, dims[0], device="cuda", dtype=dtype, requires_grad=True)
    ws = [(torch.randn(o, i, device="cuda", dtype=dtype) / i**0.5).requires_grad_() for i, o in zip(dims, dims[1:])]
    bs = [torch.randn(o, device="cuda", dtype=dtype).requires_grad_() for o in dims[1:]]
    gout = torch.randn(args.rows, dims[-1], device="cuda", dtype=dtype)

    def step():
        out = torch.ops.hypatia.fused_mlp(x, ws, bs, args.relu_last)
        return torch.autograd.grad(out, [x] + ws + bs, gout)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.calls):
            step()
            torch.cuda.synchronize()
            time.sleep(0.01)  # a gap between calls longer than any within one (host-bound calls have some)
    kernels = sorted((e for e in prof.profiler.kineto_results.events() if e.device_type() == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.start_ns())
    # Calls are separated by synchronization: the last call's kernels start after the largest gap.
    gaps = [b.start_ns() - a.end_ns() for a, b in zip(kernels, kernels[1:])]
    starts = [0] + [i + 1 for i, g in sorted(enumerate(gaps), key=lambda t: -t[1])[: args.calls - 1]]
    last = kernels[max(starts):]
    total = sum(e.duration_ns() for e in last) / 1e3
    print(f"== {args.widths} rows {args.rows} {args.dtype} relu_last={args.relu_last}: "
          f"{len(last)} kernels, {total:.1f} us")
    for e in last:
        print(f"  {e.duration_ns() / 1e3:7.1f} us  {e.name()[:110]}")


if __name__ == "__main__":
    main()
