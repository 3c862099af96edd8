"""fused_linear_relu's training path on every device: the forward's ReLU mask as bits (set exactly
where eager relu's backward passes the gradient, NaN included), the backward through them
(_fused_linear_relu_backward: on the CPU by blocks of rows for layers up to 256 wide and for half
precision at any width, else per layer), their checks and opcheck."""
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
    x[2, 0] = -float("nan")  # sign bit set: the 16-bit CPU path tests the bits, not the sign
    w = torch.randn(n, k, device=device, dtype=dtype) / k**0.5
    b = torch.randn(n, device=device, dtype=dtype) if bias else None
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
    assert mask.dtype == torch.uint8 and mask.shape == (m, (n + 127) // 128 * 16)
    assert out[1].isnan().all() and out[2].isnan().all()
    keep = (torch.arange(m) != 1) & (torch.arange(m) != 2)
    ref = F.relu(F.linear(x.double(), w.double(), None if b is None else b.double()))
    assert rel_error(out[keep], ref[keep]) < TOLERANCE[dtype] * 10
    assert torch.equal(unpack_relu_mask(mask, n), ~(out.cpu() <= 0))


# Widths around every vector length of the CPU's ReLU and mask passes (8 and 16 lanes of SSE2 /
# AVX-512, 32 of 16-bit AVX-512), so that full vectors and every kind of tail are covered.
@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 65, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_relu_and_mask_bits_at_every_tail_and_special_value(device, dtype, n):
    # The identity weight passes each row's values through the GEMM unchanged (x + 0s): negatives,
    # +-0, +Inf, both NaNs. Row 3's -Inf makes it NaN (-Inf * 0), the way a GEMM spreads it.
    torch.manual_seed(n)
    specials = torch.tensor([-0.0, 0.0, float("inf"), float("nan"), -float("nan"), -1.5, 2.0], dtype=dtype)
    x = torch.randn(6, n, dtype=dtype)
    x[0] = specials[torch.arange(n) % len(specials)]
    x[1, : n // 2] = float("nan")
    x[2] = -x[2].abs()
    x[3, 0] = -float("inf")
    x, w = x.to(device), torch.eye(n, dtype=dtype, device=device)
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, None)
    # The ReLU itself is eager's: negatives and -Inf to 0, NaN kept (and the inference op agrees).
    eager = F.relu(F.linear(x, w))
    for got in (out, torch.ops.hypatia.fused_linear_relu(x, w)):
        assert torch.equal(got.isnan(), eager.isnan()) and torch.equal(got.nan_to_num(), eager.nan_to_num())
    passes = ~(out.cpu() <= 0)
    assert torch.equal(unpack_relu_mask(mask, n), passes)
    # Bits past n, in the rest of the row's bytes, are clear.
    bits = (mask.cpu().unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1
    assert bits.reshape(6, -1)[:, n:].sum() == 0
    # The backward keeps every gradient value (NaN, Inf) where a bit is set and writes +0 elsewhere.
    grad = torch.randn(6, n, dtype=dtype)
    grad[:, ::3] = float("nan")
    grad[:, 1::5] = -float("inf")
    got = torch.ops.hypatia._relu_mask_backward(grad.to(device), mask).cpu()
    expected = torch.where(passes, grad, torch.zeros((), dtype=dtype))
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())
    assert not torch.signbit(got[~passes]).any()


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


# Narrow layers (the CPU's blocks of rows: 5000 rows are several blocks over two tasks) and a wide
# one (per-layer backward in float32/float64, blocks in half precision); 3-D input, 0 rows.
@pytest.mark.parametrize("shape", [(5000, 64, 64), (5000, 200, 7), (2, 700, 100, 256), (300, 64, 300), (0, 64, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_backward_op_matches_eager_in_float64(device, dtype, shape):
    torch.manual_seed(sum(shape))
    *batch, k, n = shape
    x = torch.randn(*batch, k, dtype=torch.float64).to(dtype).to(device)
    w = (torch.randn(n, k, dtype=torch.float64) / k**0.5).to(dtype).to(device)
    b = torch.randn(n, dtype=torch.float64).to(dtype).to(device)
    grad_out = torch.randn(*batch, n, dtype=torch.float64).to(dtype).to(device)
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
    grads = torch.ops.hypatia._fused_linear_relu_backward(grad_out, x, w, mask, True, True, True)
    # The reference masks where the op's own output passed (eager's rule on that output).
    g = torch.where(out.double() <= 0, 0.0, grad_out.double()).reshape(-1, n)
    x2d = x.double().reshape(-1, k)
    refs = [(g @ w.double()).reshape(x.shape), g.t() @ x2d, g.sum(0)]
    for got, ref in zip(grads, refs):
        assert got.dtype == dtype and got.shape == ref.shape
        if ref.numel() and ref.abs().max() > 0:
            assert rel_error(got, ref) < TOLERANCE[dtype]
        else:
            assert torch.count_nonzero(got) == 0


@pytest.mark.parametrize("width", [64, 300])
def test_backward_op_returns_the_gradients_asked_for(device, width):
    torch.manual_seed(16)
    x, w = torch.randn(3000, 64, device=device), torch.randn(width, 64, device=device) / 8
    grad_out = torch.randn(3000, width, device=device)
    _, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, None)
    every = torch.ops.hypatia._fused_linear_relu_backward(grad_out, x, w, mask, True, True, True)
    for wanted in [(True, False, False), (False, True, False), (False, False, True), (False, True, True)]:
        got = torch.ops.hypatia._fused_linear_relu_backward(grad_out, x, w, mask, *wanted)
        expected = [g for g, on in zip(every, wanted) if on]
        assert len(got) == len(expected)
        for a, e in zip(got, expected):
            assert rel_error(a, e) < 1e-6


def test_backward_op_spreads_nan_as_eager(device):
    torch.manual_seed(17)
    x = torch.randn(3000, 64, device=device)
    x[2500, 3] = float("nan")  # a NaN output row: its ReLU passes the gradient
    w, b = torch.randn(64, 64, device=device) / 8, torch.randn(64, device=device)
    grad_out = torch.randn(3000, 64, device=device)
    grad_out[7, :] = float("nan")
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    eager = torch.autograd.grad(F.relu(F.linear(*leaves)), leaves, grad_out)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    fused = torch.autograd.grad(torch.ops.hypatia.fused_linear_relu(*leaves), leaves, grad_out)
    for got, ref in zip(fused, eager):
        assert torch.equal(got.isnan(), ref.isnan())
    assert fused[0][7].isnan().any() and not fused[0][8:2500].isnan().any()


@pytest.mark.parametrize("width, blocked", [(64, True), (300, False)])
def test_cpu_narrow_backward_runs_by_blocks(width, blocked):
    """Narrow layers go back by blocks of rows (each block's weight gradient added into its task's
    sum, addmm_), wide ones by whole-layer GEMMs."""
    x, w = torch.randn(3000, 64), torch.randn(width, 64) / 8
    _, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, None)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ops.hypatia._fused_linear_relu_backward(torch.randn(3000, width), x, w, mask, True, True, True)
    names = {e.name for e in prof.events()}
    assert ("aten::addmm_" in names) == blocked, sorted(names)


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
        for wanted in [(True, True, bias), (False, True, False), (True, False, False)]:
            torch.library.opcheck(
                torch.ops.hypatia._fused_linear_relu_backward.default, (torch.randn_like(out), x, w, mask, *wanted))
