"""Times fused_mlp forward on issue 39's rows (bf16) for the process's HYPATIA_MEDIUM_MLP setting."""
import os, sys, torch
sys.path.insert(0, "python")
import hypatia_ops  # noqa
rows = {"dlrm-bottom": (65536, [13, 512, 256, 64], True), "mlp-256x4": (65536, [256]*5, False),
        "mlp-512x4": (32768, [512]*5, False), "dlrm-top-part": (65536, [512, 512, 256], False),
        "mlp-256x2": (65536, [256]*3, False), "16-256-256-64": (65536, [16, 256, 256, 64], True)}
only = sys.argv[1:] or list(rows)
for name in only:
    m, widths, relu_last = rows[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, widths[0], device="cuda", dtype=torch.bfloat16, generator=g)
    ws = [torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) / i**0.5 for i, o in zip(widths, widths[1:])]
    bs = [torch.randn(o, device="cuda", dtype=torch.bfloat16, generator=g) for o in widths[1:]]
    f = lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)
    for _ in range(5): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(7):
        s.record()
        for _ in range(50): f()
        e.record(); e.synchronize(); ts.append(s.elapsed_time(e) / 50 * 1000)
    ts.sort()
    print(f"{name} medium={os.environ.get('HYPATIA_MEDIUM_MLP','0')} {ts[3]:.1f} us")
