"""The initcheck controls: which of initcheck's reports also come without the library? One case per
process:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool initcheck python3 initcheck_control.py CASE

aten-*: PyTorch alone (no library loaded): a bf16 GEMM's output read by ATen's ReLU, a randn-made
tensor read alike, cuBLAS's split-K reduction, a float32 GEMM's output read by the ReLU, and 16
threads with a stream each running float32 Linear-ReLU-Linear forward and backward at once (the
concurrency test's pattern). hypatia-*: the library's ReLU-mask backward kernel reading an incoming
gradient made three ways (a bf16 GEMM, randn, a clone of a GEMM's output), and its skinny-linear
kernel reading a float32 GEMM's output (HYPATIA_SKINNY_LINEAR=1). Where only GEMM-made inputs are
reported, initcheck does not see cuBLAS's writes (docs/reliability/README.md#sanitizers)."""
import os
import sys

import torch

CASES = ("aten-gemm-then-relu", "aten-randn-then-relu", "aten-wgrad-split-k",
         "hypatia-gemm-grad", "hypatia-randn-grad", "hypatia-cloned-gemm-grad",
         "aten-fp32-gemm-then-relu", "hypatia-skinny-on-fp32-gemm", "aten-16-threads-fp32")


def main(case: str) -> None:
    if case not in CASES:
        sys.exit(f"initcheck_control.py: unknown case {case!r}; one of {', '.join(CASES)}")
    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    a = torch.randn(512, 256, device=dev, dtype=bf16)
    b = torch.randn(256, 128, device=dev, dtype=bf16)
    if case == "aten-gemm-then-relu":
        torch.relu(a @ b)
    elif case == "aten-randn-then-relu":
        torch.relu(torch.randn(512, 128, device=dev, dtype=bf16))
    elif case in ("aten-fp32-gemm-then-relu", "hypatia-skinny-on-fp32-gemm"):
        # float32 (no TF32) on a large shape, then its first 64 rows read by ATen's ReLU or by the
        # library's skinny kernel: the concurrency test's readers
        h = torch.randn(4096, 4096, device=dev) @ torch.randn(4096, 4096, device=dev)
        if case.startswith("aten-"):
            torch.relu(h[:64])
        else:
            torch.ops.load_library(os.environ["HYPATIA_OPS_LIBRARY"])
            w, bias = torch.randn(136, 4096, device=dev), torch.randn(136, device=dev)
            torch.ops.hypatia.fused_linear_relu(h[:64], w, bias)
    elif case == "aten-16-threads-fp32":
        # test_concurrency's pattern with PyTorch alone: 16 threads, a stream each, float32 Linear+ReLU
        # then Linear of new tensors, forward and backward, at once
        import threading

        def work() -> None:
            with torch.cuda.stream(torch.cuda.Stream()):
                for _ in range(20):
                    x = torch.randn(77, 104, device=dev, requires_grad=True)
                    w1, w2 = torch.randn(136, 104, device=dev), torch.randn(24, 136, device=dev)
                    out = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w1)), w2)
                    torch.autograd.grad(out.sum(), x)
                torch.cuda.current_stream().synchronize()

        threads = [threading.Thread(target=work) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elif case == "aten-wgrad-split-k":  # a long reduction, a small output: cuBLAS's split-K kernels
        g, x = torch.randn(5000, 64, device=dev, dtype=bf16), torch.randn(5000, 32, device=dev, dtype=bf16)
        torch.relu(g.t() @ x)
    else:
        torch.ops.load_library(os.environ["HYPATIA_OPS_LIBRARY"])
        x = torch.randn(512, 64, device=dev, dtype=bf16)
        w = torch.randn(128, 64, device=dev, dtype=bf16) / 8
        bias = torch.randn(128, device=dev, dtype=bf16)
        _, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, bias)
        grad = {"hypatia-gemm-grad": lambda: a @ b,
                "hypatia-randn-grad": lambda: torch.randn(512, 128, device=dev, dtype=bf16),
                "hypatia-cloned-gemm-grad": lambda: (a @ b).clone()}[case]()
        torch.ops.hypatia._fused_linear_relu_backward(grad, x, w, mask, True, True, True)
    torch.cuda.synchronize()
    print(case, "done")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
