"""A/B of two builds of the library on the CPU: fused_linear_relu and fused_mlp (forward, and the
MLP's forward+backward) against eager in the same process. One library per process (the ops
share their names), so run it alternately:

    for r in 1 2; do for lib in before.so after.so; do python ab_ops.py $lib; done; done
"""
import sys

import torch
import torch.nn.functional as F

from gemm_backends import median_ms  # this directory's


def report(name, hyp, eager):
    print(f"{name}: hypatia {hyp:.3f} eager {eager:.3f} ratio {eager / hyp:.3f}", flush=True)


def main():
    torch.ops.load_library(sys.argv[1])
    print(f"# {sys.argv[1]}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            tag = f"threads {threads} {str(dtype)[6:]:8}"
            with torch.no_grad():
                for m, k, n in [(256, 256, 512), (1024, 784, 2048), (4096, 1024, 4096)]:
                    x = torch.randn(m, k).to(dtype)
                    w, b = (torch.randn(n, k) / k**0.5).to(dtype), torch.randn(n).to(dtype)
                    calls = max(3, int(3e9 / (m * k * n)))
                    report(f"{tag} linear {m}x{k}->{n} fwd", median_ms(lambda: torch.ops.hypatia.fused_linear_relu(x, w, b), calls),
                           median_ms(lambda: F.relu(F.linear(x, w, b)), calls))
            m, d, h = 8192, 1024, 4096
            x = torch.randn(m, d).to(dtype)
            ws = [(torch.randn(h, d) / d**0.5).to(dtype), (torch.randn(d, h) / h**0.5).to(dtype)]
            bs = [torch.randn(h).to(dtype), torch.randn(d).to(dtype)]

            def eager(x, ws, bs):
                return F.linear(F.relu(F.linear(x, ws[0], bs[0])), ws[1], bs[1])

            with torch.no_grad():
                report(f"{tag} mlp {m}x{d}-{h}x2L fwd", median_ms(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False), 3),
                       median_ms(lambda: eager(x, ws, bs), 3))
            if threads == 2:  # forward+backward at one thread takes minutes
                leaves = [x.requires_grad_()] + [t.requires_grad_() for t in ws + bs]
                gout = torch.randn(m, d).to(dtype)
                report(f"{tag} mlp {m}x{d}-{h}x2L fwd+bwd",
                       median_ms(lambda: torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, False), leaves, gout), 3),
                       median_ms(lambda: torch.autograd.grad(eager(x, ws, bs), leaves, gout), 3))
                x = x.detach()


if __name__ == "__main__":
    main()
