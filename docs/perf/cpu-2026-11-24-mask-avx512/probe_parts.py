"""The parts of a fused_linear_relu 256x256->512 float32 backward on the CPU, one library (LIB),
µs per call (median of 300), three rounds: the mask pass (_relu_mask_backward) against eager's
threshold_backward, the two GEMMs, the bias sum, and the whole backward op. THR threads."""
import os, time, statistics, torch, warnings
warnings.filterwarnings("ignore")
torch.ops.load_library(os.environ.get("LIB","build/libhypatia_ops.so"))
torch.set_num_threads(int(os.environ.get("THR","1")))
M, K, N = 256, 256, 512
x = torch.randn(M, K); w = torch.randn(N, K) / K**0.5; b = torch.randn(N); g = torch.randn(M, N)
out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
outr = torch.relu(x @ w.t() + b)
def timeit(f, n=300):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
gm = torch.ops.hypatia._relu_mask_backward(g, mask)
cases = {
 "relu_mask_backward": lambda: torch.ops.hypatia._relu_mask_backward(g, mask),
 "threshold_backward": lambda: torch.ops.aten.threshold_backward(g, outr, 0),
 "mm dgrad g@w": lambda: gm.mm(w),
 "mm wgrad g.t()@x": lambda: gm.t().mm(x),
 "sum0": lambda: gm.sum(0),
 "hyp bwd op": lambda: torch.ops.hypatia._fused_linear_relu_backward(g, x, w, mask, True, True, True),
}
for r in range(3):
    print(" ".join("%s=%.1f" % (k, timeit(f)) for k, f in cases.items()))
