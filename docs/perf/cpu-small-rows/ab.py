import json, os, sys, time, torch
sys.path.insert(0, "/work/main/python")
import hypatia_ops
import torch.nn.functional as F
torch.set_num_threads(int(os.environ.get("T", "1")))
lib = sys.argv[1]
def eager(x, ws, bs):
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w, b)
        if i < len(ws) - 1: h = F.relu(h)
    return h
def hyp(x, ws, bs): return hypatia_ops.fused_mlp(x, ws, bs)
def timed(fn, x, ws, bs, train, budget=0.15):
    params = [x] + ws + bs
    def call():
        if train:
            out = fn(x, ws, bs); torch.autograd.grad(out, params, torch.ones_like(out))
        else:
            with torch.no_grad(): fn(x, ws, bs)
    for _ in range(5): call()
    s = time.perf_counter(); call(); one = time.perf_counter() - s
    n = max(3, int(budget / 5 / max(one, 1e-6)))
    r = []
    for _ in range(5):
        s = time.perf_counter()
        for _ in range(n): call()
        r.append((time.perf_counter() - s) / n * 1e6)
    return sorted(r)[2]
for widths in ([256]*5, [13, 512, 256, 64], [1024]*3, [64]*3, [512, 1024, 512]):
    for dt in (torch.float32, torch.bfloat16):
        for rows in (1, 16, 64, 128, 256, 1024):
            x = torch.randn(rows, widths[0]).to(dt).requires_grad_()
            ws = [(torch.randn(o, i) / i**0.5).to(dt).requires_grad_() for i, o in zip(widths, widths[1:])]
            bs = [torch.zeros(o, dtype=dt, requires_grad=True) for o in widths[1:]]
            for train in (False, True):
                e = timed(eager, x, ws, bs, train); h = timed(hyp, x, ws, bs, train)
                print(json.dumps(dict(lib=lib, widths="-".join(map(str, widths)), dtype=str(dt)[6:], rows=rows,
                                      mode="train" if train else "infer", eager=e, hyp=h)), flush=True)
