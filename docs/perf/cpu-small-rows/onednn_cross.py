import time, torch
torch.set_num_threads(int(__import__("sys").argv[1]) if len(__import__("sys").argv) > 1 else 1)
lin = torch.ops.mkldnn._linear_pointwise
def t(fn, n):
    for _ in range(20): fn()
    r = []
    for _ in range(5):
        s = time.perf_counter()
        for _ in range(n): fn()
        r.append((time.perf_counter() - s) / n * 1e6)
    return sorted(r)[2]
for K, N in ((256, 256), (64, 64), (1024, 1024), (512, 256)):
    w = torch.randn(N, K); b = torch.randn(N)
    for M in (1, 4, 16, 64, 256, 1024):
        x = torch.randn(M, K)
        n = max(20, int(2e5 / (M * K * N / 1e4 + 50)))
        a = t(lambda: torch.addmm(b, x, w.t()), n)
        o = t(lambda: lin(x, w, b, "none", [], ""), n)
        print(f"{M}x{K}->{N}: addmm {a:.1f} us, onednn {o:.1f} us, onednn/addmm {o/a:.2f}")
