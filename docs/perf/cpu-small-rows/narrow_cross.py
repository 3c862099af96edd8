import time, torch, sys
sys.path.insert(0, "python")
import hypatia_ops
torch.set_num_threads(int(sys.argv[1]))
def t(fn, n):
    for _ in range(20): fn()
    r = []
    for _ in range(7):
        s = time.perf_counter()
        for _ in range(n): fn()
        r.append((time.perf_counter() - s) / n * 1e6)
    return sorted(r)[3]
with torch.no_grad():
  for K, N in ((64, 64), (128, 128), (256, 256), (64, 256), (256, 64)):
    w = torch.randn(N, K); b = torch.randn(N)
    for M in (1, 4, 16, 64, 256, 1024):
        x = torch.randn(M, K)
        n = max(20, int(2e5 / (M * K * N / 1e4 + 50)))
        a = t(lambda: torch.addmm(b, x, w.t()), n)
        h = t(lambda: hypatia_ops.fused_mlp(x, [w], [b]), n)
        print(f"{sys.argv[1]}t {M}x{K}->{N}: addmm {a:.1f} us, hypatia {h:.1f} us, hypatia/addmm {h/a:.2f}", flush=True)
