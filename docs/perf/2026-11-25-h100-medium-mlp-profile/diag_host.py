"""Issue 39 diagnosis: where fwd+bwd time goes beyond the GPU kernels (host, syncs, allocator)."""
import sys, time, warnings
from pathlib import Path
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hypatia_ops  # noqa

def make(rows, widths, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(0)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)
    x = r(rows, widths[0]).to(dtype).requires_grad_()
    ws = [(r(n, k) / k**0.5).to(dtype).requires_grad_() for k, n in zip(widths, widths[1:])]
    bs = [(r(n) / 2).to(dtype).requires_grad_() for n in widths[1:]]
    gout = r(rows, widths[-1]).to(dtype)
    return x, ws, bs, gout

def eager(x, ws, bs, relu_last):
    for i, (w, b) in enumerate(zip(ws, bs)):
        x = F.linear(x, w, b)
        if i + 1 < len(ws) or relu_last:
            x = F.relu(x)
    return x

def hyp(x, ws, bs, relu_last):
    return torch.ops.hypatia.fused_mlp.default(x, ws, bs, relu_last)

def loop_us(fn, n=30):
    for _ in range(10): fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n): fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / n * 1e6)
    return sorted(out)[1]

for rows, widths, relu_last in [(65536, [256] * 5, False), (65536, [16, 512, 256, 64], True), (8192, [1024] * 3, False)]:
    x, ws, bs, gout = make(rows, widths)
    params = [x] + ws + bs
    for name, f in [("hypatia", hyp), ("eager", eager)]:
        fwd = lambda: (torch.no_grad().__enter__(), f(x, ws, bs, relu_last))  # noqa
        def fwd():
            with torch.no_grad():
                return f(x, ws, bs, relu_last)
        def fb():
            return torch.autograd.grad(f(x, ws, bs, relu_last), params, gout)
        def fwd_graph():
            return f(x, ws, bs, relu_last)
        out = fwd_graph()
        def bwd_only():
            return torch.autograd.grad(out, params, gout, retain_graph=True)
        print(f"== {name} {rows}x{widths} relu_last={relu_last}: loop us/call fwd {loop_us(fwd):.1f}, "
              f"fwd(grad-recording) {loop_us(fwd_graph):.1f}, bwd-only {loop_us(bwd_only):.1f}, fwd+bwd {loop_us(fb):.1f}", flush=True)
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fb(); torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode(0)
        syncs = [str(w.message)[:80] for w in caught if "synchron" in str(w.message).lower()]
        print(f"   syncing calls in one fwd+bwd: {len(syncs)} {syncs[:3]}")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10): fb()
            torch.cuda.synchronize()
        ka = prof.key_averages()
        cpu = sorted(ka, key=lambda e: e.self_cpu_time_total, reverse=True)[:14]
        print("   top self-CPU (us/call, calls/call): " + "; ".join(f"{e.key[:48]} {e.self_cpu_time_total/10:.0f} x{e.count/10:g}" for e in cpu))
        kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        if kern:
            busy = sum(e.time_range.elapsed_us() for e in kern)
            span = max(e.time_range.end for e in kern) - min(e.time_range.start for e in kern)
            print(f"   GPU: kernels {busy/10:.1f} us/call, span {span/10:.1f} us/call, busy {100*busy/span:.0f}%")
    del x, ws, bs, gout, params, out
    torch.cuda.empty_cache()
