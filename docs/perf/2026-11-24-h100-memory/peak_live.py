"""What is alive at the peak of one forward+backward call of fused_mlp and of eager PyTorch, on CUDA:
the caching allocator's trace of one call (after warm-up calls that autotune), replayed to find the
moment of most bytes allocated, and each block alive then with the innermost frame that names the
library (or, for eager, the Python line). Usage (HYPATIA_CUBLASLT_LOG=1 adds the autotuner's choices):

    python peak_live.py M WIDTHS DTYPE       e.g. 8192 1024,4096,1024 float32
"""
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402

M, widths, dtype = int(sys.argv[1]), [int(w) for w in sys.argv[2].split(",")], getattr(torch, sys.argv[3])
gen = torch.Generator(device="cuda").manual_seed(0)
rand = lambda *s: torch.randn(*s, device="cuda", generator=gen)  # noqa: E731
x = rand(M, widths[0]).to(dtype).requires_grad_()
ws = [(rand(widths[i + 1], widths[i]) * math.sqrt(2 / widths[i])).to(dtype).requires_grad_() for i in range(len(widths) - 1)]
bs = [(rand(widths[i + 1]) * 0.5).to(dtype).requires_grad_() for i in range(len(widths) - 1)]
gout = rand(M, widths[-1]).to(dtype)


def eager(x, ws, bs):
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w, b)
        h = torch.relu(h) if i + 1 < len(ws) else h
    return h


def fused(x, ws, bs):
    return hypatia_ops.fused_mlp(x, ws, bs)


def where(frames):
    for f in frames:
        if "hypatia" in f["name"] and "autograd" not in f["name"].lower():
            return f["name"].split("(")[0]
    for f in frames:
        if f["filename"].endswith("peak_live.py"):
            return f"peak_live.py:{f['line']} {f['name']}"
    return frames[0]["name"][:80] if frames else "?"


for name, fn in (("eager", eager), ("hypatia", fused)):
    for _ in range(3):
        torch.autograd.grad(fn(x, ws, bs), [x] + ws + bs, gout)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all")
    grads = torch.autograd.grad(fn(x, ws, bs), [x] + ws + bs, gout)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
    del grads
    live, total, best, best_live = {}, 0, -1, {}
    for event in snapshot["device_traces"][torch.cuda.current_device()]:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += event["size"]
            if total > best:
                best, best_live = total, dict(live)
        elif event["action"] == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
    print(f"== {name} {M}x{sys.argv[2]} {sys.argv[3]}: peak {peak_mib:.1f} MiB above the level before the call "
          f"({best / 2**20:.1f} MiB in the call's trace); alive then:")
    for event in sorted(best_live.values(), key=lambda e: -e["size"]):
        if event["size"] >= 1 << 20:
            print(f"   {event['size'] / 2**20:8.1f} MiB  {where(event['frames'])}")
