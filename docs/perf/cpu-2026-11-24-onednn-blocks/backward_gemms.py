"""The wide layers' backward GEMMs in float32, 2 threads: the input gradient g @ W by MKL's mm
against oneDNN's inner product (on a copy of W.T), and the weight and bias gradients (g.T @ x,
g.sum(0)) by MKL against oneDNN's mkldnn_linear_backward_weights (with the copies into oneDNN's
layout) and against the inner product on transposed copies. Median ms of 3 calls, 2 rounds."""
import torch

from gemm_backends import median_ms  # this directory's


def main():
    torch.set_grad_enabled(False)
    torch.set_num_threads(2)
    linear = torch.ops.mkldnn._linear_pointwise
    for m, n, k in [(8192, 4096, 1024), (8192, 1024, 4096)]:
        g, w, x = torch.randn(m, n), torch.randn(n, k) * 0.03, torch.randn(m, k)
        for _ in range(2):
            dgrad_mkl = median_ms(lambda: g.mm(w), 3)
            dgrad_dnn = median_ms(lambda: linear(g, w.t().contiguous(), None, "none", [], ""), 3)
            wgrad_mkl = median_ms(lambda: (g.t().mm(x), g.sum(0)), 3)
            wgrad_dnn = median_ms(lambda: torch.ops.aten.mkldnn_linear_backward_weights(g.to_mkldnn(), x.to_mkldnn(), w, True), 3)
            wgrad_ip = median_ms(lambda: linear(g.t().contiguous(), x.t().contiguous(), None, "none", [], ""), 3)
            print(f"M{m} N{n} K{k}: input grad MKL {dgrad_mkl:.1f} oneDNN {dgrad_dnn:.1f} (MKL/oneDNN {dgrad_mkl / dgrad_dnn:.3f}) | "
                  f"weight+bias grads MKL {wgrad_mkl:.1f} oneDNN backward_weights {wgrad_dnn:.1f} ({wgrad_mkl / wgrad_dnn:.3f}) "
                  f"inner product on transposes {wgrad_ip:.1f} ({wgrad_mkl / wgrad_ip:.3f})", flush=True)


if __name__ == "__main__":
    main()
