"""Backward of both ops: gradcheck in float64, agreement with eager autograd, what is saved."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from conftest import (BF16_KERNEL_CPU, BF16_WIDENED_CPU, ONEDNN_FLOAT32_BLOCKS_CPU, bf16_kernel_runs, bf16_wide_weight_grad_runs, cpu_threads,
                      f32_weight_grad_runs, rel_error)


def params(shape, device, dtype=torch.float64):
    return torch.randn(shape, dtype=dtype, device=device, requires_grad=True)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("input_shape", [(5,), (4, 6), (2, 3, 6)])
def test_fused_linear_relu_gradcheck(device, bias, input_shape):
    torch.manual_seed(0)
    x = params(input_shape, device)
    w = params((7, input_shape[-1]), device)
    b = params((7,), device) if bias else None
    assert gradcheck(torch.ops.hypatia.fused_linear_relu, (x, w, b))
    assert gradgradcheck(torch.ops.hypatia.fused_linear_relu, (x, w, b))


@pytest.mark.parametrize("relu_last", [False, True])
def test_fused_mlp_gradcheck(device, relu_last):
    torch.manual_seed(1)
    x = params((3, 2, 5), device)
    ws = [params((6, 5), device), params((4, 6), device), params((3, 4), device)]
    bs = [params((6,), device), None, params((3,), device)]
    fn = lambda x, *wb: torch.ops.hypatia.fused_mlp(x, list(wb[:3]), list(wb[3:]), relu_last)  # noqa: E731
    assert gradcheck(fn, (x, *ws, *bs))


def test_fused_mlp_double_backward_raises(device):
    x = params((3, 5), device)
    w = params((4, 5), device)
    out = torch.ops.hypatia.fused_mlp(x, [w], [None], True)
    with pytest.raises(RuntimeError, match="fused_mlp: double backward"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_match_eager_autograd(device, dtype):
    torch.manual_seed(2)
    x0 = torch.randn(32, 24, device=device)
    w0 = [torch.randn(48, 24, device=device) / 5, torch.randn(16, 48, device=device) / 7]
    b0 = [torch.randn(48, device=device), torch.randn(16, device=device)]
    grad_out = torch.randn(32, 16, device=device)

    def grads(run, dt):
        # Leaves rounded to `dtype` first, so that the float64 reference sees the same values.
        leaf = lambda t: t.to(dtype).to(dt, copy=True).requires_grad_()  # noqa: E731
        x, ws, bs = leaf(x0), [leaf(w) for w in w0], [leaf(b) for b in b0]
        run(x, ws, bs).backward(grad_out.to(dtype).to(dt))
        return [t.grad for t in (x, *ws, *bs)]

    eager = lambda x, ws, bs: F.linear(F.relu(F.linear(x, ws[0], bs[0])), ws[1], bs[1])  # noqa: E731
    fused_mlp = lambda x, ws, bs: torch.ops.hypatia.fused_mlp(x, ws, bs, False)  # noqa: E731
    per_layer = lambda x, ws, bs: F.linear(torch.ops.hypatia.fused_linear_relu(x, ws[0], bs[0]), ws[1], bs[1])  # noqa: E731
    reference = grads(eager, torch.float64)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for run in (fused_mlp, per_layer):
        for got, ref in zip(grads(run, dtype), reference):
            assert rel_error(got, ref) < tol


def test_relu_gradient_at_nan_and_zero_matches_eager(device):
    # Eager relu's backward blocks the gradient where out <= 0 and passes it at NaN.
    x = torch.tensor([[float("nan"), 1.0], [-1.0, 2.0], [0.0, 0.0]], device=device, requires_grad=True)
    w = torch.eye(2, device=device, requires_grad=True)
    out = torch.ops.hypatia.fused_linear_relu(x, w)
    out.backward(torch.ones_like(out))
    x_ref = x.detach().clone().requires_grad_()
    F.relu(F.linear(x_ref, w.detach())).backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, x_ref.grad, equal_nan=True)


def test_only_needed_grads_and_no_grad_mode(device):
    x = torch.randn(4, 3, device=device)
    w = torch.randn(5, 3, device=device, requires_grad=True)
    out = torch.ops.hypatia.fused_linear_relu(x, w, None)
    out.sum().backward()
    assert x.grad is None and w.grad is not None
    with torch.no_grad():
        assert torch.ops.hypatia.fused_linear_relu(x, w, None).grad_fn is None
        assert torch.ops.hypatia.fused_mlp(x, [w], [None], True).grad_fn is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["fused_linear_relu", "fused_mlp"])
def test_input_written_after_the_call_with_frozen_weights(device, op, dtype):
    # Gradients w.r.t. the input only (a frozen model, a saliency map): eager saves no input then,
    # so writing to it after the call must not fail the backward (fuzzer seed 1 program 13829).
    torch.manual_seed(3)
    ws = [torch.randn(16, 8, device=device, dtype=dtype), torch.randn(4, 16, device=device, dtype=dtype)]
    bs = [torch.randn(16, device=device, dtype=dtype), None]

    def run(fused):
        leaf = torch.randn(5, 8, dtype=dtype, generator=torch.Generator().manual_seed(4)).to(device).requires_grad_()
        h = leaf.clone().unsqueeze(0)  # a view of a non-leaf, as the fuzzer's program wrote to
        if op == "fused_linear_relu":
            out = torch.ops.hypatia.fused_linear_relu(h, ws[0], bs[0]) if fused else F.relu(F.linear(h, ws[0], bs[0]))
        else:
            out = torch.ops.hypatia.fused_mlp(h, ws, bs, False) if fused else F.linear(F.relu(F.linear(h, ws[0], bs[0])), ws[1])
        h.add_(1.0)
        out.float().square().sum().backward()
        return out.detach(), leaf.grad

    (out, grad), (ref_out, ref_grad) = run(True), run(False)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert rel_error(out, ref_out) < tol and rel_error(grad, ref_grad) < tol


def saved_by(call):
    """(the tensors autograd saved while call() ran, its result)."""
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = call()
    return saved, result


def test_saves_the_input_only_for_weight_gradients(device):
    x = torch.randn(8, 16, device=device, requires_grad=True)
    w = torch.randn(32, 16, device=device)
    saved, _ = saved_by(lambda: (torch.ops.hypatia.fused_linear_relu(x, w, None),
                                 torch.ops.hypatia.fused_mlp(x, [w, w.t().contiguous()], [None, None], False)))
    # The input's place holds a stand-in with its shape and one element of storage.
    stand_ins = [t for t in saved if t.shape == x.shape and t.dtype == x.dtype and t.untyped_storage().nbytes() == 4]
    assert len(stand_ins) == 2 and not any(t is x for t in saved)


def test_fused_linear_relu_saves_a_mask_not_the_output(device):
    x = torch.randn(8, 16, device=device, requires_grad=True)
    w = torch.randn(32, 16, device=device, requires_grad=True)
    saved, out = saved_by(lambda: torch.ops.hypatia.fused_linear_relu(x, w, None))
    kinds = sorted(((tuple(t.shape), t.dtype) for t in saved), key=str)
    # 1 bit per output element, on every device (32 bits padded to cuBLASLt's 128 per row).
    mask = ((8, 16), torch.uint8)
    assert kinds == sorted([((8, 16), x.dtype), ((32, 16), w.dtype), mask], key=str)
    assert out.grad_fn is not None


@pytest.mark.parametrize("rows", [7, 511, 512, 1001])
@pytest.mark.parametrize("kn", [(64, 64), (300, 257), (1030, 1025), (1001, 1100)])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_bfloat16_input_grad(rows, kn, threads):
    """A bfloat16 layer's input gradient g @ w on the CPU: by the library's kernel where w has at
    least 2^20 elements and the rows pay for packing it (its rows interleaved in pairs: odd and ragged
    widths; a gradient at a row stride that is not n), else by aten::mm; as close to float64 as
    eager's."""
    torch.manual_seed(rows + kn[0])
    k, n = kn
    x = torch.randn(rows, k).bfloat16().requires_grad_()
    w = (torch.randn(n, k) / k**0.5).bfloat16()
    g = torch.randn(rows, n + 3).bfloat16()[:, 1:n + 1]
    with cpu_threads(threads):
        out = torch.ops.hypatia.fused_mlp(x, [w], [None], False)  # one layer, no ReLU: only the GEMM's gradient
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            (grad,) = torch.autograd.grad(out, [x], g)
    eager_ops = {e.name for e in prof.events()} & {"aten::mm"}
    kernel = n * k >= 1 << 20 and bf16_kernel_runs(rows, k, n)  # a layer of n in, k out features
    assert (not eager_ops) == kernel, eager_ops
    ref = g.double() @ w.double()
    assert grad.dtype == torch.bfloat16 and grad.shape == x.shape
    assert rel_error(grad, ref) <= 1.05 * rel_error(g.mm(w), ref) + 1e-6


@pytest.mark.parametrize("rows", [511, 512, 1001])
@pytest.mark.parametrize("dims", [(64, 1030, 1025), (33, 2049, 513), (40, 1024, 512)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_bfloat16_relu_input_grad(rows, dims, bias, threads):
    """The gradient through a bfloat16 fused_mlp's hidden ReLU on the CPU: its mask and the hidden
    bias gradient in the library's kernel where the layer above has at least 2^20 weights and the rows
    pay for packing them (no aten::threshold_backward then), in float32 row blocks where the CPU has no
    native bfloat16 GEMM, else eager's ops. A NaN and an Inf in the input make whole hidden rows NaN
    and +-Inf: the gradient passes NaN and +Inf, as eager's ReLU backward does, and stops at -Inf's
    ReLU output, 0. The input and hidden bias gradients as close to float64 as eager's."""
    d, hidden, out_features = dims
    torch.manual_seed(rows + d)
    x = torch.randn(rows, d).bfloat16()
    x[3, 0], x[5, 1] = float("nan"), float("inf")
    x.requires_grad_()
    ws = [(torch.randn(hidden, d) / d**0.5).bfloat16().requires_grad_(),
          (torch.randn(out_features, hidden) / hidden**0.5).bfloat16().requires_grad_()]
    b = torch.randn(hidden).bfloat16().requires_grad_() if bias else None
    g = torch.randn(rows, out_features).bfloat16()
    wanted = [x] + ([b] if bias else [])
    with cpu_threads(threads):
        out = torch.ops.hypatia.fused_mlp(x, ws, [b, None], False)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            grads = torch.autograd.grad(out, wanted, g)
        eager_out = F.linear(F.relu(F.linear(x, ws[0], b)), ws[1])
        eager = torch.autograd.grad(eager_out, wanted, g)
    eager_ops = {e.name for e in prof.events()} & {"aten::threshold_backward"}
    kernel = hidden * out_features >= 1 << 20 and bf16_kernel_runs(rows, hidden, out_features)
    # Without native bfloat16 GEMMs the row blocks apply the mask themselves: no threshold_backward either.
    assert (not eager_ops) == (kernel or BF16_WIDENED_CPU), eager_ops
    x64, w0, w1 = x.double(), ws[0].double(), ws[1].double()
    h = F.relu(x64 @ w0.t() + (b.double() if bias else 0))
    dz = torch.where(h <= 0, 0, g.double() @ w1)
    references = [dz @ w0] + ([dz.sum(0)] if bias else [])
    for grad, ref, eager_grad in zip(grads, references, eager):
        assert grad.dtype == torch.bfloat16 and grad.shape == ref.shape and ref.isfinite().all()
        assert rel_error(grad, ref) <= 1.1 * rel_error(eager_grad, ref) + 1e-6


@pytest.mark.parametrize("rows_special", [(4097, True), (5000, False)])
@pytest.mark.parametrize("dims", [(1024, 1030, 1025), (1024, 1030, 1100, 1030)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cpu_wide_mlp_backward_in_row_chunks(rows_special, dims, threads, dtype):
    """A wide fused_mlp's backward on the CPU where every GEMM takes the library's kernels (and
    oneDNN's, for float32 input gradients): below the top layer, chunks of 1024 bfloat16 or 512
    float32 rows go down through the layers (wide_mlp_backward), the weight gradients summed over the
    chunks; the last chunk 1 row, or 904 / 392. bfloat16 then runs no aten::mm or threshold_backward,
    float32 one oneDNN inner product a layer and chunk; elsewhere the per-layer backward. With a NaN
    and an Inf in the input (whole hidden rows NaN and +-Inf), every gradient has NaN and Inf where
    eager's has them. Every gradient's finite entries as close to float64 as eager's."""
    rows, special = rows_special
    torch.manual_seed(rows + len(dims))
    x = torch.randn(rows, dims[0]).to(dtype)
    if special:
        x[3, 0], x[5, 1] = float("nan"), float("inf")
    x.requires_grad_()
    depth = len(dims) - 1
    ws = [(torch.randn(dims[i + 1], dims[i]) / dims[i]**0.5).to(dtype).requires_grad_() for i in range(depth)]
    bs = [torch.randn(dims[i + 1]).to(dtype).requires_grad_() for i in range(depth - 1)] + [None]
    g = torch.randn(rows, dims[-1]).to(dtype)
    wanted = [x] + ws + bs[:-1]
    with cpu_threads(threads):
        out = torch.ops.hypatia.fused_mlp(x, ws, bs, False)
        with torch.no_grad():  # the hidden layers that the backward masks by
            hidden = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, False)[:-1]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            grads = torch.autograd.grad(out, wanted, g)
        h, eager_hidden = x, []
        for i in range(depth):
            h = F.linear(h, ws[i], bs[i])
            if i + 1 < depth:
                h = F.relu(h)
                eager_hidden.append(h.detach())
        eager = torch.autograd.grad(h, wanted, g)
    names = [e.name for e in prof.events()]
    if dtype == torch.bfloat16:
        eager_ops = set(names) & {"aten::mm", "aten::threshold_backward"}
        kernel = BF16_KERNEL_CPU and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        assert (not eager_ops) == kernel, eager_ops
    else:
        chunks = (rows + 511) // 512
        inner_products = names.count("mkldnn::_linear_pointwise")
        assert inner_products == (chunks * depth if ONEDNN_FLOAT32_BLOCKS_CPU else 0), inner_products

    def reference(relu_outputs):
        """The float64 gradients through ReLUs that are zero where relu_outputs (one forward's hidden
        layers) are <= 0, as eager's threshold_backward: each forward's rounding may put a pre-activation
        near 0 on the other side."""
        w64 = [w.double() for w in ws]
        outs, h64 = [], x.double()
        for i in range(depth):
            h64 = h64 @ w64[i].t() + (bs[i].double() if bs[i] is not None else 0)
            h64 = torch.where(relu_outputs[i] <= 0, 0, h64) if i + 1 < depth else h64
            outs.append(h64)
        dz, ref_w, ref_b = g.double(), [None] * depth, [None] * depth
        for i in reversed(range(depth)):
            ref_w[i] = dz.t() @ (outs[i - 1] if i > 0 else x.double())
            ref_b[i] = dz.sum(0)
            dz = dz @ w64[i]
            if i > 0:
                dz = torch.where(relu_outputs[i - 1] <= 0, 0, dz)
        return [dz] + ref_w + ref_b[:-1]

    for grad, ref, eager_grad, eager_ref in zip(grads, reference(hidden), eager, reference(eager_hidden)):
        assert grad.dtype == dtype and grad.shape == ref.shape
        assert torch.equal(grad.isnan(), eager_grad.isnan()) and torch.equal(grad.isinf(), eager_grad.isinf())
        finite = eager_grad.isfinite() & ref.isfinite() & eager_ref.isfinite()
        if finite.any():
            assert rel_error(grad[finite], ref[finite]) <= 1.1 * rel_error(eager_grad[finite], eager_ref[finite]) + 1e-6


def check_wide_weight_grad(dtype, rows, k, n, threads, kernel_runs, vs_eager, slack):
    """A wide layer's weight and bias gradients on the CPU (fused_mlp, one layer, no ReLU: only the
    GEMM's gradients), from input rows at a stride that is not k: aten::mm's for the weight exactly
    where the library's kernel does not run, and as close to float64 as eager's GEMM and sum (within
    vs_eager times their error, plus slack)."""
    torch.manual_seed(rows + k)
    h = torch.randn(rows, k + 5).to(dtype)[:, 2:k + 2]
    w = (torch.randn(n, k) / k**0.5).to(dtype).requires_grad_()
    b = torch.randn(n).to(dtype).requires_grad_()
    g = torch.randn(rows, n).to(dtype)
    with cpu_threads(threads):
        out = torch.ops.hypatia.fused_mlp(h, [w], [b], False)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            grad_w, grad_b = torch.autograd.grad(out, [w, b], g)
    # The weight gradient's mm is g.T [n, rows] @ h [rows, k] (the input gradient's: g @ w, [rows, n]).
    weight_mm = [e for e in prof.events() if e.name == "aten::mm" and e.input_shapes[0] == [n, rows]]
    blocks = dtype == torch.bfloat16 and BF16_WIDENED_CPU  # float32 row blocks: no eager GEMM either
    assert (not weight_mm) == (kernel_runs or blocks), weight_mm
    for grad, ref, eager in [(grad_w, g.double().t() @ h.double(), g.t().mm(h)), (grad_b, g.double().sum(0), g.sum(0))]:
        assert grad.dtype == dtype and grad.shape == ref.shape
        assert rel_error(grad, ref) <= vs_eager * rel_error(eager, ref) + slack


def check_wide_weight_grad_keeps_nan_and_inf(dtype, special, rows, k, n, finite_error):
    """NaN and Inf in a wide layer's input (one in the last row) reach its weight gradient where
    eager's put them; the finite entries as close to float64 as finite_error."""
    torch.manual_seed(3)
    h = torch.randn(rows, k).to(dtype)
    h[5, 7] = special
    h[rows - 1, k - 1] = -special
    w = (torch.randn(n, k) / k**0.5).to(dtype).requires_grad_()
    g = torch.randn(rows, n).to(dtype)
    g[5, :3] = 0  # 0 * Inf is NaN, in eager's GEMM too
    out = torch.ops.hypatia.fused_mlp(h, [w], [None], False)
    (grad,) = torch.autograd.grad(out, [w], g)
    eager = g.t().mm(h)
    assert torch.equal(grad.isnan(), eager.isnan()) and torch.equal(grad.isinf(), eager.isinf())
    assert torch.equal(grad[grad.isinf()], eager[eager.isinf()])
    finite = eager.isfinite()
    assert rel_error(grad[finite], (g.double().t() @ h.double())[finite]) < finite_error


@pytest.mark.parametrize("rows", [1000, 1024, 1537])
@pytest.mark.parametrize("kn", [(1000, 1000), (1024, 1024), (1000, 1051), (2051, 517), (300, 4097), (64, 16384)])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_float32_weight_grad(rows, kn, threads):
    """float32: the library's kernel from 1024 rows (its 512-row chunks; ragged tiles of 6 x 64; the
    output split by rows or by columns between the threads)."""
    k, n = kn
    check_wide_weight_grad(torch.float32, rows, k, n, threads, f32_weight_grad_runs(rows, n, k), 2, 1e-7)


@pytest.mark.parametrize("special", [float("nan"), float("inf")])
def test_cpu_float32_weight_grad_keeps_nan_and_inf(special):
    check_wide_weight_grad_keeps_nan_and_inf(torch.float32, special, 1100, 1030, 1030, 1e-5)


@pytest.mark.parametrize("rows", [4095, 4096, 5121])
@pytest.mark.parametrize("kn", [(1024, 1024), (1030, 1100), (700, 1500), (2000, 600), (1024, 512)])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_bfloat16_wide_weight_grad(rows, kn, threads):
    """bfloat16: the library's kernel from 4096 rows (its 1024-row chunks of row pairs, an odd last
    row too; output rows past 16 and columns past 64; the output split by rows or by columns)."""
    k, n = kn
    check_wide_weight_grad(torch.bfloat16, rows, k, n, threads, bf16_wide_weight_grad_runs(rows, n, k), 1.05, 1e-6)


@pytest.mark.parametrize("special", [float("nan"), float("inf")])
def test_cpu_bfloat16_wide_weight_grad_keeps_nan_and_inf(special):
    check_wide_weight_grad_keeps_nan_and_inf(torch.bfloat16, special, 4099, 1030, 1030, 1e-2)


@pytest.mark.parametrize("rows", [256, 257, 1000])
@pytest.mark.parametrize("kn", [(1, 1), (7, 17), (33, 64), (64, 64), (100, 256), (256, 15)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_narrow_bfloat16_weight_grad(rows, kn, bias, threads):
    """A narrow bfloat16 layer's weight and bias gradients on the CPU: where the library's kernel runs
    (from one 256-row chunk up; pairs of rows, so odd rows too; column tails; input rows at a stride
    that is not k), as close to float64 as eager's GEMM and sum, without eager's ops."""
    torch.manual_seed(rows + kn[0])
    k, n = kn
    h = torch.randn(rows, k + 5).bfloat16()[:, 2:k + 2]
    w = (torch.randn(n, k) / k**0.5).bfloat16().requires_grad_()
    b = torch.randn(n).bfloat16().requires_grad_() if bias else None
    g = torch.randn(rows, n).bfloat16()
    with cpu_threads(threads):
        out = torch.ops.hypatia.fused_mlp(h, [w], [b], False)  # one layer, no ReLU: only the GEMM's gradients
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            grads = torch.autograd.grad(out, [w] + ([b] if bias else []), g)
    eager_ops = {e.name for e in prof.events()} & {"aten::mm", "aten::sum"}
    kernel = BF16_KERNEL_CPU and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if BF16_WIDENED_CPU:  # float32 row blocks: their own GEMMs (the bias sums may be aten::sum's)
        assert "aten::mm" not in eager_ops, eager_ops
    else:
        assert (not eager_ops) == kernel, eager_ops
    references = [g.double().t() @ h.double()] + ([g.double().sum(0)] if bias else [])
    eager = [g.t().mm(h)] + ([g.sum(0)] if bias else [])
    for grad, ref, eager_grad in zip(grads, references, eager):
        assert grad.dtype == torch.bfloat16 and grad.shape == ref.shape
        assert rel_error(grad, ref) <= 1.05 * rel_error(eager_grad, ref) + 1e-6


def test_fused_mlp_saved_tensor_hooks_get_every_saved_output(device):
    """Hooks that offload or recompute saved tensors (torch.utils.checkpoint) see each layer's
    saved output, as they would eager's."""
    x = torch.randn(8, 16, device=device, requires_grad=True)
    ws = [torch.randn(n, k, device=device, requires_grad=True) for k, n in [(16, 32), (32, 24), (24, 4)]]
    saved, out = saved_by(lambda: torch.ops.hypatia.fused_mlp(x, ws, [None] * 3, True))
    shapes = [tuple(t.shape) for t in saved]
    assert all(shapes.count(s) == 1 for s in [(8, 32), (8, 24)]) and any(t is out for t in saved), shapes


@pytest.mark.parametrize("op", ["fused_linear_relu", "fused_mlp"])
@pytest.mark.parametrize("dual", ["input", "weight", "bias"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_forward_mode_ad_is_refused(device, op, dual, requires_grad):
    """No forward-mode formula: a dual input raises, where dropping its tangent would be wrong."""
    import torch.autograd.forward_ad as fwAD
    x = torch.randn(4, 8, device=device, requires_grad=requires_grad)
    w = torch.randn(16, 8, device=device, requires_grad=requires_grad)
    b = torch.randn(16, device=device, requires_grad=requires_grad)
    with fwAD.dual_level():
        args = {"input": x, "weight": w, "bias": b}
        args[dual] = fwAD.make_dual(args[dual], torch.ones_like(args[dual]))
        with pytest.raises(RuntimeError, match=f"{op}: forward-mode AD"):
            if op == "fused_linear_relu":
                torch.ops.hypatia.fused_linear_relu(args["input"], args["weight"], args["bias"])
            else:
                torch.ops.hypatia.fused_mlp(args["input"], [args["weight"]], [args["bias"]], False)


def test_jvp_is_refused(device):
    x, w = torch.randn(4, 8, device=device), torch.randn(16, 8, device=device)
    with pytest.raises(RuntimeError, match="forward-mode AD"):
        torch.func.jvp(lambda t: torch.ops.hypatia.fused_mlp(t, [w], [None], False), (x,), (torch.ones_like(x),))
