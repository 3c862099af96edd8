"""The parts of a narrow bfloat16 layer's backward on the CPU, as fused_mlp's per-layer backward runs
them where oneDNN's GEMM is native bfloat16: the ReLU backward (threshold_backward), the input
gradient (g @ W), the weight gradient (g.T @ h), the bias sum; the weight and bias gradients by the
library's kernel (narrow_weight_grad_bf16, through _fused_mlp_backward of one layer); and the input
gradient by the library's narrow forward kernel (a fused_mlp call of one layer with weight W.T). Medians of ROUNDS interleaved rounds; whole fused_mlp forward+backward of 2 layers
beside eager's. Environment: LIB, THR (default 1), D (default 64), M (default 65536), ROUNDS (20)."""
import os, statistics, time, warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")
torch.ops.load_library(os.environ["LIB"])
torch.set_num_threads(int(os.environ.get("THR", "1")))
M, D = int(os.environ.get("M", "65536")), int(os.environ.get("D", "64"))
bf16 = torch.bfloat16
g = torch.randn(M, D).to(bf16)
h = torch.randn(M, D).to(bf16)
W = (torch.randn(D, D) / D**0.5).to(bf16)
W_t = W.t().contiguous()
x = torch.randn(M, D).to(bf16).requires_grad_()
ws = [(torch.randn(D, D) / D**0.5).to(bf16).requires_grad_() for _ in range(2)]
bs = [torch.randn(D).to(bf16).requires_grad_() for _ in range(2)]


def eager_mlp():
    return F.linear(F.relu(F.linear(x, ws[0], bs[0])), ws[1], bs[1])


with torch.no_grad():
    by_mm, by_kernel = g.mm(W), torch.ops.hypatia.fused_mlp(g, [W_t], [None], False)
    ref = g.double() @ W.double()
    err = lambda t: ((t.double() - ref).norm() / ref.norm()).item()  # noqa: E731
print(f"# bf16 {M} x {D}, threads {torch.get_num_threads()}; input gradient error against float64: "
      f"mm {err(by_mm):.2e}, narrow kernel {err(by_kernel):.2e}, max |difference| {(by_mm.float() - by_kernel.float()).abs().max().item()}")
parts = {
    "ReLU backward (threshold_backward)": lambda: torch.ops.aten.threshold_backward(g, h, 0),
    "input gradient, g @ W (oneDNN)": lambda: g.mm(W),
    "input gradient, narrow kernel": lambda: torch.ops.hypatia.fused_mlp(g, [W_t], [None], False),
    "weight gradient, g.T @ h (oneDNN)": lambda: g.t().mm(h),
    "bias gradient, g.sum(0)": lambda: g.sum(0),
    "weight + bias gradient, library kernel": lambda: torch.ops.hypatia._fused_mlp_backward(
        g, h, [W], [], [True], False, False, True),
    "fused_mlp 2 layers, forward+backward": lambda: torch.autograd.grad(
        torch.ops.hypatia.fused_mlp(x, ws, bs, False), [x] + ws + bs, g),
    "eager 2 layers, forward+backward": lambda: torch.autograd.grad(eager_mlp(), [x] + ws + bs, g),
}
times = {name: [] for name in parts}
for _ in range(int(os.environ.get("ROUNDS", "20")) + 1):
    for name, fn in parts.items():
        start = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - start)
flops = 2 * M * D * D
for name, ts in times.items():
    t = statistics.median(ts[1:])
    rate = f"  {flops / t / 1e9:5.0f} GFLOP/s" if "gradient," in name and "bias gradient," not in name else ""
    print(f"{name:40s} {t * 1e3:7.2f} ms{rate}")
