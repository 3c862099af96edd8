"""A/B of two builds on float32 forward+backward, where only the wide layers' input gradient
changed (oneDNN's inner product instead of MKL's mm): fused_mlp 8192x1024-4096 x 2 layers and
fused_linear_relu 4096x1024->4096, against eager in the same process, 2 threads.

    for r in 1 2 3; do for lib in before.so after.so; do python dgrad_ab.py $lib; done; done
"""
import sys

import torch
import torch.nn.functional as F

from gemm_backends import median_ms  # this directory's


def main():
    torch.ops.load_library(sys.argv[1])
    torch.set_num_threads(2)
    torch.manual_seed(0)
    m, d, h = 8192, 1024, 4096
    x = torch.randn(m, d, requires_grad=True)
    ws = [(torch.randn(h, d) / d**0.5).requires_grad_(), (torch.randn(d, h) / h**0.5).requires_grad_()]
    bs = [torch.randn(h).requires_grad_(), torch.randn(d).requires_grad_()]
    leaves, gout = [x] + ws + bs, torch.randn(m, d)
    hyp = median_ms(lambda: torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, False), leaves, gout), 3)
    eager = median_ms(lambda: torch.autograd.grad(F.linear(F.relu(F.linear(x, ws[0], bs[0])), ws[1], bs[1]), leaves, gout), 3)
    print(f"{sys.argv[1]} mlp 8192x1024-4096x2L fwd+bwd: hypatia {hyp:.1f} eager {eager:.1f} ratio {eager / hyp:.3f}", flush=True)
    x = torch.randn(4096, 1024, requires_grad=True)
    w, b = (torch.randn(4096, 1024) / 32).requires_grad_(), torch.randn(4096).requires_grad_()
    gout = torch.randn(4096, 4096)
    hyp = median_ms(lambda: torch.autograd.grad(torch.ops.hypatia.fused_linear_relu(x, w, b), [x, w, b], gout), 3)
    eager = median_ms(lambda: torch.autograd.grad(F.relu(F.linear(x, w, b)), [x, w, b], gout), 3)
    print(f"{sys.argv[1]} linear 4096x1024->4096 fwd+bwd: hypatia {hyp:.1f} eager {eager:.1f} ratio {eager / hyp:.3f}", flush=True)


if __name__ == "__main__":
    main()
