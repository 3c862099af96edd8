"""Where the time of one fused-op call goes: host time per call (a loop of calls, synchronized at the
end) against the GPU kernels it launches (torch.profiler, per kernel name), for fused_mlp or
fused_linear_relu, forward or forward + backward. A call whose host time exceeds its kernels'
is bound by launch overhead. HYPATIA_CUBLASLT_LOG=1 adds the cuBLASLt autotuner's timings and
choices; --compare lists the kernels of eager and torch.compile on the same data beside hypatia's.
Example:

    python scripts/profile_ops.py --rows 262144 --widths 64,64,64,64,64,64,64,64,64 --dtype bfloat16
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hypatia_ops  # noqa: E402  (loads the library)


def host_us_per_call(fn, iters: int, grad: bool = False) -> float:
    """Median over 5 loops of `iters` calls, synchronized at each loop's end."""
    loops = []
    with torch.set_grad_enabled(grad):
        for _ in range(5):
            fn()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            loops.append((time.perf_counter() - start) / iters * 1e6)
    return sorted(loops)[2]


def eager_forward(args, x, ws, bs):
    def eager():
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = torch.nn.functional.linear(h, w, b)
            h = torch.relu(h) if i + 1 < len(ws) or args.op == "linear_relu" or args.relu_last else h
        return h

    return eager


def host_breakdown(args, forward, x, ws, bs, gout):
    eager = eager_forward(args, x, ws, bs)
    fns = {"hypatia": forward, "eager": eager}
    if args.op == "linear_relu":
        fns["addmm_act"] = lambda: torch._addmm_activation(bs[0], x, ws[0].t())
    times = {name: host_us_per_call(fn, args.iters) for name, fn in fns.items()}
    print("== host us per forward call (no grad, calls back to back): "
          + ", ".join(f"{name} {us:.1f}" for name, us in times.items()))

    # Forward + backward, and its parts: the forward that records the graph, the backward op on
    # its own, and what torch.autograd.grad costs around a one-op graph (the engine's floor).
    params = [x] + ws + bs
    with torch.no_grad():
        if args.op == "mlp":
            saved = torch.ops.hypatia._fused_mlp_forward.default(x, ws, bs, args.relu_last)
            saved = saved if args.relu_last else saved[:-1]
            has_bias = [True] * len(ws)
            backward = lambda: torch.ops.hypatia._fused_mlp_backward.default(  # noqa: E731
                gout, x, ws, saved, has_bias, args.relu_last, True, True)
        else:
            _, mask = torch.ops.hypatia._fused_linear_relu_masked.default(x, ws[0], bs[0])
            backward = lambda: torch.ops.hypatia._fused_linear_relu_backward.default(  # noqa: E731
                gout, x, ws[0], mask, True, True, True)
    parts = {
        "hypatia fwd+bwd": (lambda: torch.autograd.grad(forward(), params, gout), True),
        "eager fwd+bwd": (lambda: torch.autograd.grad(eager(), params, gout), True),
        "hypatia forward recording the graph": (forward, True),
        "hypatia backward op alone": (backward, False),
        "autograd.grad of x * 1": (lambda: torch.autograd.grad(x * 1, x, x), True),
    }
    print("== host us per call: " + ", ".join(
        f"{name} {host_us_per_call(fn, args.iters, grad):.1f}" for name, (fn, grad) in parts.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=65536)
    p.add_argument("--widths", default="64,64,64", help="in_features, then each layer's out_features")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--op", default="mlp", choices=["mlp", "linear_relu"])
    p.add_argument("--relu-last", action="store_true", help="mlp: a ReLU after the last layer too")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--host", action="store_true",
                   help="also: host time per call of hypatia, eager and (linear_relu) _addmm_activation, forward "
                        "and forward + backward, and of the backward's parts")
    p.add_argument("--host-ops", action="store_true",
                   help="also: the host side of one hypatia forward + backward, per op and CUDA API call, by "
                        "self CPU time (which calls a host-bound call spends its time in)")
    p.add_argument("--compare", action="store_true",
                   help="also profile eager and torch.compile (default mode) on the same data")
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    widths = [int(w) for w in args.widths.split(",")]
    torch.manual_seed(0)
    x = torch.randn(args.rows, widths[0], device="cuda").to(dtype).requires_grad_()
    ws = [(torch.randn(n, k, device="cuda") / k**0.5).to(dtype).requires_grad_() for k, n in zip(widths, widths[1:])]
    bs = [(torch.randn(n, device="cuda") / 2).to(dtype).requires_grad_() for n in widths[1:]]
    gout = torch.randn(args.rows, widths[-1], device="cuda").to(dtype)
    if args.op == "mlp":
        forward = lambda: hypatia_ops.fused_mlp(x, ws, bs, args.relu_last)  # noqa: E731
    else:
        forward = lambda: hypatia_ops.fused_linear_relu(x, ws[0], bs[0])  # noqa: E731

    if args.host:
        host_breakdown(args, forward, x, ws, bs, gout)
    if args.host_ops:
        host_ops(forward, [x] + ws + bs, gout, args.iters)
    contenders = [("hypatia", forward)]
    if args.compare:
        eager = eager_forward(args, x, ws, bs)
        contenders += [("eager", eager), ("compile", torch.compile(eager, dynamic=False))]
    for who, model in contenders:
        profile_kernels(f"{who} {args.op} {args.rows}x{args.widths} {args.dtype}", model, [x] + ws + bs, gout,
                        args.iters)


def host_ops(forward, params, gout, iters: int):
    """Self CPU time per forward + backward call of each op and CUDA API call, on the calling thread
    and autograd's device thread, over `iters` calls after a warm-up."""
    def fwd_bwd():
        torch.autograd.grad(forward(), params, gout)

    for _ in range(5):
        fwd_bwd()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(iters):
            fwd_bwd()
        torch.cuda.synchronize()
    rows = sorted(((e.self_cpu_time_total / iters, e.count / iters, e.key) for e in prof.key_averages()),
                  reverse=True)
    print(f"== host: self CPU us per forward + backward call, {sum(r[0] for r in rows):.1f} us in all")
    for us, count, key in rows[:30]:
        print(f"  {us:8.1f} us  x{count:g}  {key[:100]}")


def profile_kernels(title: str, forward, params, gout, iters: int):
    """Time per call of `forward` (no grad) and of forward + backward, calls back to back, and the
    GPU kernels of each, per kernel name."""
    def fwd():
        with torch.no_grad():
            forward()

    def fwd_bwd():
        torch.autograd.grad(forward(), params, gout)

    for name, fn in [("fwd", fwd), ("fwd+bwd", fwd_bwd)]:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        loop_ms = (time.perf_counter() - start) / iters * 1e3
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
        kernels = sorted(
            ((e.device_time_total / 10, e.count / 10, e.key) for e in prof.key_averages()
             if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0),
            reverse=True)
        total = sum(k[0] for k in kernels)
        print(f"== {title} {name}: {loop_ms * 1e3:.1f} us per call (calls back to back), "
              f"GPU kernels {total:.1f} us per call")
        for us, count, key in kernels:
            print(f"  {us:8.1f} us  x{count:g}  {key[:100]}")


if __name__ == "__main__":
    main()
