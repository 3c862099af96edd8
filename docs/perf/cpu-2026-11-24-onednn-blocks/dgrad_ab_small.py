"""fused_linear_relu float32 forward+backward at 256x256->512 and 1024x784->2048 against eager, 1 and
2 threads, for an A/B of two builds (one library per process):

    python dgrad_ab_small.py lib.so
"""
import sys

import torch
import torch.nn.functional as F

from gemm_backends import median_ms  # this directory's


def main():
    torch.ops.load_library(sys.argv[1])
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for m, k, n in [(256, 256, 512), (1024, 784, 2048)]:
            x, g = torch.randn(m, k, requires_grad=True), torch.randn(m, n)
            w, b = (torch.randn(n, k) / 16).requires_grad_(), torch.randn(n).requires_grad_()
            calls = 200 if m == 256 else 10
            hyp = median_ms(lambda: torch.autograd.grad(torch.ops.hypatia.fused_linear_relu(x, w, b), [x, w, b], g), calls)
            eager = median_ms(lambda: torch.autograd.grad(F.relu(F.linear(x, w, b)), [x, w, b], g), calls)
            print(f"{sys.argv[1]} t{threads} {m}x{k}->{n} fwd+bwd hyp {hyp:.3f} eager {eager:.3f} ratio {eager / hyp:.3f}", flush=True)


if __name__ == "__main__":
    main()
