import time, torch, sys
torch.set_num_threads(int(sys.argv[1]))
lin = torch.ops.mkldnn._linear_pointwise
def t(fn, n):
    for _ in range(20): fn()
    r = []
    for _ in range(7):
        s = time.perf_counter()
        for _ in range(n): fn()
        r.append((time.perf_counter() - s) / n * 1e6)
    return sorted(r)[3]
for K, N in ((256, 256), (1024, 1024), (784, 2048), (1024, 4096)):
    w = torch.randn(N, K); b = torch.randn(N)
    for M in (8, 16, 32, 64, 128, 256, 512):
        x = torch.randn(M, K)
        n = max(10, int(3e5 / (M * K * N / 1e4 + 50)))
        a = t(lambda: torch.addmm(b, x, w.t()), n)
        o = t(lambda: lin(x, w, b, "none", [], ""), n)
        print(f"{sys.argv[1]}t {M}x{K}->{N}: addmm {a:.1f} us, onednn {o:.1f} us, onednn/addmm {o/a:.2f}", flush=True)
