"""fused_mlp and eager forward+backward on the H100: wall time per call back to back at the benchmark's rows and at 64 rows
(where the GPU work is negligible, so the time is the host's), and whether anything in hypatia's fwd+bwd
synchronizes (torch.cuda.set_sync_debug_mode("error")). bf16. Usage: python docs/perf/h100/host_diag.py [ROWS]"""
import sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa

SHAPES = {"dlrm-bottom": (13, 512, 256, 64), "mlp-256x4": (256,) * 5, "mlp-1024x2": (1024,) * 3}
RELU_LAST = {"dlrm-bottom": True}


def per_call_us(fn, iters=50):
    loops = []
    for _ in range(5):
        fn(); torch.cuda.synchronize()
        t = time.perf_counter(); c = time.process_time()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        loops.append(((time.perf_counter() - t) / iters * 1e6, (time.process_time() - c) / iters * 1e6))
    loops.sort()
    return loops[2]


for name, widths in SHAPES.items():
    relu_last = RELU_LAST.get(name, False)
    for rows in (int(sys.argv[1]) if len(sys.argv) > 1 else 65536, 64):
        torch.manual_seed(0)
        dt = torch.bfloat16
        x = torch.randn(rows, widths[0], device="cuda").to(dt).requires_grad_()
        ws = [(torch.randn(n, k, device="cuda") / k**0.5).to(dt).requires_grad_() for k, n in zip(widths, widths[1:])]
        bs = [(torch.randn(n, device="cuda") / 2).to(dt).requires_grad_() for n in widths[1:]]
        gout = torch.randn(rows, widths[-1], device="cuda").to(dt)
        params = [x] + ws + bs

        def eager():
            h = x
            for i, (w, b) in enumerate(zip(ws, bs)):
                h = torch.nn.functional.linear(h, w, b)
                h = torch.relu(h) if i + 1 < len(ws) or relu_last else h
            return h

        hyp = lambda: hypatia_ops.fused_mlp(x, ws, bs, relu_last)  # noqa
        res = {}
        for who, f in (("hypatia", hyp), ("eager", eager)):
            def no_grad_fwd(f=f):
                with torch.no_grad():
                    f()
            res[who + " fwd"] = per_call_us(no_grad_fwd)
            res[who + " fwd+bwd"] = per_call_us(lambda: torch.autograd.grad(f(), params, gout))
        res["autograd.grad(x*1)"] = per_call_us(lambda: torch.autograd.grad(x * 1, x, x))
        print(f"{name} rows={rows}: " + ", ".join(f"{k} {w:.0f} us wall / {c:.0f} cpu" for k, (w, c) in res.items()), flush=True)
        if rows == 64:
            continue
        torch.cuda.set_sync_debug_mode("error")
        try:
            torch.autograd.grad(hyp(), params, gout)
            print(f"{name}: no synchronizing call in hypatia fwd+bwd", flush=True)
        except Exception as e:  # noqa
            print(f"{name}: sync in hypatia fwd+bwd: {e}", flush=True)
        finally:
            torch.cuda.set_sync_debug_mode(0)
