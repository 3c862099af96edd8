"""CUDA-only behaviour: CUDA graphs, threads, streams, devices, TF32. Skipped without a GPU."""
import threading

import pytest
import torch
import torch.nn.functional as F

from conftest import TOLERANCE, rel_error, requires_cuda

pytestmark = requires_cuda


def reference(x, w, b):
    return F.relu(F.linear(x.double(), w.double(), b.double()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_capture_and_replay(dtype):
    # A shape seen first inside the capture (no timing allowed there), then replayed with new data.
    # As CUDA graphs require, the process has run the ops before (cuBLAS(Lt) handles and workspaces
    # are made on first use, which a capture forbids), on another shape.
    torch.ops.hypatia.fused_linear_relu(torch.randn(8, 16, device="cuda", dtype=dtype), torch.randn(4, 16, device="cuda", dtype=dtype))
    x = torch.randn(333, 96, device="cuda", dtype=dtype)
    w = torch.randn(160, 96, device="cuda", dtype=dtype) / 10
    b = torch.randn(160, device="cuda", dtype=dtype)
    w2 = torch.randn(96, 160, device="cuda", dtype=dtype) / 13
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = torch.ops.hypatia.fused_linear_relu(x, w, b)
        logits = torch.ops.hypatia.fused_mlp(x, [w, w2], [b, None], False)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(out, reference(x, w, b)) < tol
        ref_logits = F.linear(reference(x, w, b), w2.double())
        assert rel_error(logits, ref_logits) < tol


def test_concurrent_threads_get_correct_results():
    shapes = [(64, 128, 256), (500, 64, 64), (32, 512, 1024), (1000, 256, 128)]
    errors = []

    def worker(m, k, n):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(10):
                x, w, b = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda")
                out = torch.ops.hypatia.fused_linear_relu(x, w, b)
                stream.synchronize()
                errors.append(rel_error(out, reference(x, w, b)))

    threads = [threading.Thread(target=worker, args=s) for s in shapes * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 80 and max(errors) < 1e-5


def test_runs_on_the_current_stream():
    x, w, b = torch.randn(256, 256, device="cuda"), torch.randn(512, 256, device="cuda"), torch.randn(512, device="cuda")
    torch.ops.hypatia.fused_linear_relu(x, w, b)  # warm (autotuned on the default stream)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(10_000_000)  # keeps the side stream busy: a result written elsewhere would be early
        out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert rel_error(out, reference(x, w, b)) < 1e-5


def test_tf32_setting_is_honoured():
    torch.manual_seed(0)
    x, w, b = torch.randn(512, 1024, device="cuda"), torch.randn(512, 1024, device="cuda"), torch.randn(512, device="cuda")
    ref = reference(x, w, b)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        exact = rel_error(torch.ops.hypatia.fused_linear_relu(x, w, b), ref)
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = rel_error(torch.ops.hypatia.fused_linear_relu(x, w, b), ref)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    assert exact < 1e-5 and 1e-5 < tf32 < 3e-3


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_non_default_device():
    x, w, b = torch.randn(64, 32, device="cuda:1"), torch.randn(16, 32, device="cuda:1"), torch.randn(16, device="cuda:1")
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    assert out.device == torch.device("cuda:1") and rel_error(out, reference(x, w, b)) < 1e-5


def unpack_relu_mask(mask, n):
    """The training forward's mask bits as bool [rows, n] (layout in ops/checks.h)."""
    bits = (mask.cpu().unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1
    return bits.reshape(mask.shape[0], -1)[:, :n].bool()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mkn", [(5, 3, 7), (64, 32, 130), (300, 256, 384)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_training_forward_mask_is_where_eagers_relu_passes_the_gradient(dtype, mkn, bias):
    # The bits must be set exactly where eager relu's backward passes the gradient: out > 0, or NaN.
    # The output keeps the NaN (some cuBLASLt ReLU epilogues drop it: they must not be chosen).
    m, k, n = mkn
    torch.manual_seed(m)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    x[1, 0] = float("nan")
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
    assert mask.dtype == torch.uint8 and mask.shape == (m, (n + 127) // 128 * 16)
    assert out[1].isnan().all()
    keep = torch.arange(m) != 1
    ref = F.relu(F.linear(x.double(), w.double(), None if b is None else b.double()))
    assert rel_error(out[keep], ref[keep]) < TOLERANCE[dtype] * 10
    assert torch.equal(unpack_relu_mask(mask, n), ~(out.cpu() <= 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_backward_through_the_mask_bits_matches_eager(dtype):
    # 130 outputs (bits padded to 256 per row), 3-D input, a non-contiguous incoming gradient.
    torch.manual_seed(3)
    x0, w0, b0 = torch.randn(2, 33, 40), torch.randn(130, 40) / 6, torch.randn(130)
    grad_out = torch.randn(2, 130, 33).transpose(1, 2)

    def grads(fn, dt, device):
        leaves = [t.to(dtype).to(device=device, dtype=dt).requires_grad_() for t in (x0, w0, b0)]
        fn(*leaves).backward(grad_out.to(dtype).to(device=device, dtype=dt))
        return [t.grad for t in leaves]

    ref = grads(lambda x, w, b: F.relu(F.linear(x, w, b)), torch.float64, "cpu")
    got = grads(torch.ops.hypatia.fused_linear_relu, dtype, "cuda")
    for g, r in zip(got, ref):
        assert rel_error(g, r) < (1e-5 if dtype == torch.float32 else 2e-2)


def test_relu_mask_backward_rejects_a_mask_of_the_wrong_shape():
    grad = torch.randn(4, 7, device="cuda")
    with pytest.raises(RuntimeError, match=r"_relu_mask_backward: mask must be uint8 \[4, 16\] for grad of shape \[4, 7\]"):
        torch.ops.hypatia._relu_mask_backward(grad, torch.zeros(4, 1, dtype=torch.uint8, device="cuda"))


def test_opcheck_training_forward_and_mask_backward():
    samples = [((4, 8), (5, 8), True), ((2, 3, 8), (130, 8), False), ((0, 8), (5, 8), True)]
    for x_shape, w_shape, bias in samples:
        x, w = torch.randn(x_shape, device="cuda"), torch.randn(w_shape, device="cuda")
        b = torch.randn(w_shape[0], device="cuda") if bias else None
        torch.library.opcheck(torch.ops.hypatia._fused_linear_relu_masked.default, (x, w, b))
        out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
        torch.library.opcheck(torch.ops.hypatia._relu_mask_backward.default, (torch.randn_like(out), mask))


@pytest.mark.parametrize("mkn", [(6, 8, 5), (64, 32, 130), (300, 256, 384)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_nan_survives_the_relu_epilogue(dtype, mkn):
    # Some cuBLASLt ReLU epilogues map NaN to 0 (bf16/fp16 at 64x32x130 and 6x8x5 on the H100,
    # cuBLAS 13); torch.relu keeps it, so those algorithms must never be chosen.
    m, k, n = mkn
    torch.manual_seed(k)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    x[1, 0] = float("nan")
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    for bias in (b, None):
        assert torch.ops.hypatia.fused_linear_relu(x, w, bias)[1].isnan().all()
        assert torch.ops.hypatia.fused_mlp(x, [w], [bias], True)[1].isnan().all()
