"""fused_linear_relu's training path on every device: the forward's ReLU mask as bits (set exactly
where eager relu's backward passes the gradient, NaN included), the backward through them, their
checks and opcheck."""
import pytest
import torch
import torch.nn.functional as F

from conftest import TOLERANCE, rel_error


def unpack_relu_mask(mask, n):
    """The training forward's mask bits as bool [rows, n] (layout in ops/checks.h)."""
    bits = (mask.cpu().unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1
    return bits.reshape(mask.shape[0], -1)[:, :n].bool()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mkn", [(5, 3, 7), (64, 32, 130), (300, 256, 384)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_training_forward_mask_is_where_eagers_relu_passes_the_gradient(device, dtype, mkn, bias):
    # The bits must be set exactly where eager relu's backward passes the gradient: out > 0, or NaN.
    # The output keeps the NaN (some cuBLASLt ReLU epilogues drop it: they must not be chosen).
    m, k, n = mkn
    torch.manual_seed(m)
    x = torch.randn(m, k, device=device, dtype=dtype)
    x[1, 0] = float("nan")
    w = torch.randn(n, k, device=device, dtype=dtype) / k**0.5
    b = torch.randn(n, device=device, dtype=dtype) if bias else None
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
    assert mask.dtype == torch.uint8 and mask.shape == (m, (n + 127) // 128 * 16)
    assert out[1].isnan().all()
    keep = torch.arange(m) != 1
    ref = F.relu(F.linear(x.double(), w.double(), None if b is None else b.double()))
    assert rel_error(out[keep], ref[keep]) < TOLERANCE[dtype] * 10
    assert torch.equal(unpack_relu_mask(mask, n), ~(out.cpu() <= 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_backward_through_the_mask_bits_matches_eager(device, dtype):
    # 130 outputs (bits padded to 256 per row), 3-D input, a non-contiguous incoming gradient.
    torch.manual_seed(3)
    x0, w0, b0 = torch.randn(2, 33, 40), torch.randn(130, 40) / 6, torch.randn(130)
    grad_out = torch.randn(2, 130, 33).transpose(1, 2)

    def grads(fn, dt, device):
        leaves = [t.to(dtype).to(device=device, dtype=dt).requires_grad_() for t in (x0, w0, b0)]
        fn(*leaves).backward(grad_out.to(dtype).to(device=device, dtype=dt))
        return [t.grad for t in leaves]

    ref = grads(lambda x, w, b: F.relu(F.linear(x, w, b)), torch.float64, "cpu")
    got = grads(torch.ops.hypatia.fused_linear_relu, dtype, device)
    for g, r in zip(got, ref):
        assert rel_error(g, r) < (1e-5 if dtype == torch.float32 else 2e-2)


def test_relu_mask_backward_rejects_a_mask_of_the_wrong_shape(device):
    grad = torch.randn(4, 7, device=device)
    with pytest.raises(RuntimeError, match=r"_relu_mask_backward: mask must be uint8 \[4, 16\] for grad of shape \[4, 7\]"):
        torch.ops.hypatia._relu_mask_backward(grad, torch.zeros(4, 1, dtype=torch.uint8, device=device))


def test_opcheck_training_forward_and_mask_backward(device):
    samples = [((4, 8), (5, 8), True), ((2, 3, 8), (130, 8), False), ((0, 8), (5, 8), True)]
    for x_shape, w_shape, bias in samples:
        x, w = torch.randn(x_shape, device=device), torch.randn(w_shape, device=device)
        b = torch.randn(w_shape[0], device=device) if bias else None
        torch.library.opcheck(torch.ops.hypatia._fused_linear_relu_masked.default, (x, w, b))
        out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
        torch.library.opcheck(torch.ops.hypatia._relu_mask_backward.default, (torch.randn_like(out), mask))
