"""fused_mlp on CUDA for the medium forward's widths (up to 512), over row counts and dtypes, for
this process's HYPATIA_MEDIUM_MLP setting (0: the per-layer path, 1: the one-kernel medium
forward): forward without grad, and forward + backward. Medians of 7 bursts of back-to-back
calls. Prints one line per case: mode dtype widths rows fwd_us fwdbwd_us. Arguments, if any: the
shapes to run instead of SHAPES (e.g. 256-256-256 13-512-256-64)."""
import os, sys, torch
sys.path.insert(0, "python")
import hypatia_ops  # noqa: F401

SHAPES = [[256] * 3, [256] * 4, [256] * 5, [16, 256, 256, 64], [64, 256, 64], [128, 256, 256, 128], [256, 128, 256]]
ROWS = [2048, 8192, 16384, 32768, 65536, 262144]


def timed(f, calls):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(7):
        s.record()
        for _ in range(calls):
            f()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / calls * 1000)
    return sorted(ts)[3]


mode = os.environ.get("HYPATIA_MEDIUM_MLP", "unset")
for dtype in (torch.bfloat16, torch.float16):
    for widths in [[int(w) for w in arg.split("-")] for arg in sys.argv[1:]] or SHAPES:
        for m in ROWS:
            g = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(m, widths[0], device="cuda", dtype=dtype, generator=g)
            ws = [(torch.randn(o, i, device="cuda", dtype=dtype, generator=g) / i**0.5).requires_grad_()
                  for i, o in zip(widths, widths[1:])]
            bs = [torch.randn(o, device="cuda", dtype=dtype, generator=g).requires_grad_() for o in widths[1:]]
            with torch.no_grad():
                fwd = timed(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False), 20)
            grad = torch.randn(m, widths[-1], device="cuda", dtype=dtype, generator=g)
            def step():
                out = torch.ops.hypatia.fused_mlp(x, ws, bs, False)
                torch.autograd.grad(out, ws + bs, grad)
            both = timed(step, 10)
            name = "-".join(map(str, widths))
            print(f"{mode} {str(dtype)[6:]} {name} {m} {fwd:.1f} {both:.1f}", flush=True)
