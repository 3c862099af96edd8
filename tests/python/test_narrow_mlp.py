"""The one-kernel narrow MLP behind fused_mlp on CUDA (ops/cuda/narrow_mlp_kernel.cu), forward and
backward: results against float64 with eager's per-layer rounding and against eager itself, its
edge cases, the shapes that must fall back to the per-layer path, the HYPATIA_DISABLE_NARROW_MLP
switch, and which kernels run (one launch forward; the chain and the weight-gradient kernel backward)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import TOLERANCE, rel_error, requires_cuda

pytestmark = requires_cuda

KERNEL_NAME = "narrow_mlp_forward_kernel"
BACKWARD_KERNEL_NAME = "narrow_mlp_backward_kernel"
NARROW_DISABLED = os.environ.get("HYPATIA_DISABLE_NARROW_MLP", "") not in ("", "0")


def make_mlp(widths, dtype, bias_pattern="all", device="cuda"):
    """Random layers; bias_pattern: 'all', 'none' or 'mixed' (None on odd layers)."""
    ws, bs = [], []
    for i, (k, n) in enumerate(zip(widths, widths[1:])):
        ws.append((torch.randn(n, k, dtype=torch.float64) / k**0.5).to(dtype).to(device))
        has_bias = bias_pattern == "all" or (bias_pattern == "mixed" and i % 2 == 0)
        bs.append(torch.randn(n, dtype=torch.float64).to(dtype).to(device) if has_bias else None)
    return ws, bs


def reference_rounded(x, ws, bs, relu_last):
    """float64 math on the same inputs, rounding each layer's output to x's dtype as eager does."""
    h = x.double()
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w.double(), None if b is None else b.double())
        if i + 1 < len(ws) or relu_last:
            h = F.relu(h)
        h = h.to(x.dtype).double()
    return h


def eager(x, ws, bs, relu_last):
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w, b)
        if i + 1 < len(ws) or relu_last:
            h = F.relu(h)
    return h


def cuda_kernel_names(fn):
    """Names of the CUDA kernels `fn` launches (memcpy/memset excluded), or None when the profiler
    recorded no GPU activity at all (no CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm-up: one-time setup (cuBLASLt handles, kernel attributes) stays out of the trace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not events:
        return None
    return [e.name for e in events if not e.name.startswith(("Memcpy", "Memset"))]


def check_matches(out, x, ws, bs, relu_last):
    ref = reference_rounded(x, ws, bs, relu_last)
    assert out.shape == ref.shape and out.dtype == x.dtype and out.device == x.device
    tol = TOLERANCE[x.dtype]
    assert rel_error(out, ref) < tol
    assert rel_error(out, eager(x, ws, bs, relu_last)) < tol


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 7, 64, 1000, 65536])
@pytest.mark.parametrize("widths", [[64, 64, 64], [64] * 9, [32, 128, 16], [16, 16]])
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("bias_pattern", ["all", "none", "mixed"])
def test_matches_rounded_reference_and_eager(dtype, rows, widths, relu_last, bias_pattern):
    torch.manual_seed(rows + len(widths))
    x = torch.randn(rows, widths[0], dtype=torch.float64).to(dtype).cuda()
    ws, bs = make_mlp(widths, dtype, bias_pattern)
    check_matches(torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), x, ws, bs, relu_last)


def test_batched_input_keeps_its_batch_dims():
    torch.manual_seed(3)
    x = torch.randn(4, 250, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    ws, bs = make_mlp([64, 128, 32], torch.bfloat16)
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, False)
    assert out.shape == (4, 250, 32)
    check_matches(out, x, ws, bs, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("relu_last", [False, True])
def test_nan_stays_in_its_row_and_passes_relu(dtype, relu_last):
    # relu(NaN) must be NaN: were it 0, row 3 would come out finite (bias terms only).
    torch.manual_seed(4)
    x = torch.randn(100, 64, dtype=torch.float64).to(dtype).cuda()
    x[3, 5] = float("nan")
    ws, bs = make_mlp([64, 64, 64], dtype)
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)
    assert out[3].isnan().all()
    others = torch.cat([out[:3], out[4:]])
    assert not others.isnan().any()
    keep = torch.ones(100, dtype=torch.bool)
    keep[3] = False
    check_matches(others, x[keep.cuda()], ws, bs, relu_last)


@pytest.mark.parametrize("shape", [(0, 64), (0, 3, 64)])
def test_zero_rows(shape):
    x = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    ws, bs = make_mlp([64, 64, 32], torch.bfloat16)
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, True)
    assert out.shape == shape[:-1] + (32,) and out.dtype == torch.bfloat16


def misaligned(t):
    """t's values in a contiguous tensor whose data starts 2 bytes past a 16-byte boundary."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = flat[1:].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 16 != 0
    return out


FALLBACKS = {  # name -> (widths, dtype, layers transform)
    "width_20": ([64, 20, 64], torch.bfloat16, None),
    "float32": ([64, 64, 64], torch.float32, None),
    "width_256": ([64, 256, 64], torch.bfloat16, None),
    "17_layers": ([16] * 18, torch.float16, None),
    "weights_exceed_shared_memory": ([128] * 17, torch.bfloat16, None),
    "non_contiguous_weight": ([64, 64, 64], torch.bfloat16, "transpose_weight"),
    "misaligned_input": ([64, 64, 64], torch.bfloat16, "misalign_input"),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_fallback_cases_are_still_right(case):
    widths, dtype, transform = FALLBACKS[case]
    torch.manual_seed(5)
    x = torch.randn(300, widths[0], dtype=torch.float64).to(dtype).cuda()
    ws, bs = make_mlp(widths, dtype, "mixed")
    if transform == "transpose_weight":
        ws[0] = ws[0].t().contiguous().t()
        assert not ws[0].is_contiguous()
    elif transform == "misalign_input":
        x = misaligned(x)
    fn = lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, True)  # noqa: E731
    check_matches(fn(), x, ws, bs, True)
    names = cuda_kernel_names(fn)
    if names is not None:
        assert not any(KERNEL_NAME in n for n in names), names


@pytest.mark.skipif(NARROW_DISABLED, reason="HYPATIA_DISABLE_NARROW_MLP is set")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_kernel_launch(dtype):
    torch.manual_seed(6)
    x = torch.randn(65536, 64, dtype=torch.float64).to(dtype).cuda()
    ws, bs = make_mlp([64, 64, 64], dtype)
    names = cuda_kernel_names(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False))
    if names is None:
        pytest.skip("torch.profiler recorded no CUDA activity (CUPTI unavailable?)")
    assert len(names) == 1 and KERNEL_NAME in names[0], names


@pytest.mark.skipif(NARROW_DISABLED, reason="HYPATIA_DISABLE_NARROW_MLP is set")
def test_disable_switch_gives_the_per_layer_path(tmp_path):
    torch.manual_seed(7)
    x = torch.randn(5000, 64, dtype=torch.float64).to(torch.bfloat16)
    ws, bs = make_mlp([64, 64, 64], torch.bfloat16, "mixed", device="cpu")
    torch.save({"x": x, "ws": ws, "bs": bs}, tmp_path / "inputs.pt")
    script = f"""
import torch, hypatia_ops, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from test_narrow_mlp import cuda_kernel_names
d = torch.load({str(tmp_path / "inputs.pt")!r})
x = d["x"].cuda()
ws = [w.cuda() for w in d["ws"]]
bs = [None if b is None else b.cuda() for b in d["bs"]]
fn = lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, True)
torch.save({{"out": fn().cpu(), "names": cuda_kernel_names(fn)}}, {str(tmp_path / "result.pt")!r})
"""
    env = dict(os.environ, HYPATIA_DISABLE_NARROW_MLP="1")
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo / "python"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = torch.load(tmp_path / "result.pt")
    if result["names"] is not None:
        assert result["names"] and not any(KERNEL_NAME in n for n in result["names"]), result["names"]

    xc, wsc = x.cuda(), [w.cuda() for w in ws]
    bsc = [None if b is None else b.cuda() for b in bs]
    fused = torch.ops.hypatia.fused_mlp(xc, wsc, bsc, True)
    assert rel_error(result["out"], fused) < TOLERANCE[torch.bfloat16]
    check_matches(result["out"].cuda(), xc, wsc, bsc, True)


# ----------------------------------------------------------------------------- training


def reference_backward_rounded(gout, x, ws, has_bias, outputs, relu_last):
    """float64 gradients from the same saved outputs, rounding each layer's input gradient to the
    storage dtype where eager's dgrad GEMM does, and masking where eager's ReLU backward does."""
    dtype = x.dtype
    g = gout.double().reshape(-1, gout.shape[-1])
    hs = [x.double().reshape(-1, x.shape[-1])] + [o.double().reshape(-1, o.shape[-1]) for o in outputs]
    gws, gbs = [None] * len(ws), [None] * len(ws)
    for i in reversed(range(len(ws))):
        if i + 1 < len(ws) or relu_last:
            g = torch.where(hs[i + 1] <= 0, torch.zeros_like(g), g)
        gws[i] = g.t() @ hs[i]
        gbs[i] = g.sum(0) if has_bias[i] else None
        g = (g @ ws[i].double()).to(dtype).double()
    return g.reshape(x.shape), gws, gbs


def narrow_grads(x, ws, bs, relu_last, gout):
    """fused_mlp's output, every layer's output (as the training forward saved them) and the
    gradients of input, weights and present biases."""
    leaves = [x.detach().requires_grad_()] + [w.detach().requires_grad_() for w in ws]
    leaves += [b.detach().requires_grad_() for b in bs if b is not None]
    it = iter(leaves[1 + len(ws):])
    biases = [None if b is None else next(it) for b in bs]
    outputs = torch.ops.hypatia._fused_mlp_forward(leaves[0].detach(), [w.detach() for w in ws],
                                                    [None if b is None else b.detach() for b in bs], relu_last)
    out = torch.ops.hypatia.fused_mlp(leaves[0], leaves[1:1 + len(ws)], biases, relu_last)
    grads = torch.autograd.grad(out, leaves, gout)
    return out, outputs, grads


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 33, 1000, 65536])
@pytest.mark.parametrize("widths", [[64, 64, 64], [64] * 9, [32, 128, 16], [16, 16]])
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("bias_pattern", ["all", "mixed"])
def test_training_matches_rounded_reference_and_eager(dtype, rows, widths, relu_last, bias_pattern):
    torch.manual_seed(rows + 3 * len(widths))
    x = torch.randn(rows, widths[0], dtype=torch.float64).to(dtype).cuda()
    ws, bs = make_mlp(widths, dtype, bias_pattern)
    gout = torch.randn(rows, widths[-1], dtype=torch.float64).to(dtype).cuda()
    out, outputs, grads = narrow_grads(x, ws, bs, relu_last, gout)
    tol = TOLERANCE[dtype]
    # The training forward keeps every layer's output, each as eager computes it.
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w, b)
        if i + 1 < len(ws) or relu_last:
            h = F.relu(h)
        assert rel_error(outputs[i], h) < tol, i
    assert torch.equal(out, outputs[-1])

    has_bias = [b is not None for b in bs]
    gx, gws, gbs = reference_backward_rounded(gout, x, ws, has_bias, outputs, relu_last)
    expected = [gx] + gws + [g for g in gbs if g is not None]
    assert len(grads) == len(expected)
    for i, (got, ref) in enumerate(zip(grads, expected)):
        assert got.dtype == dtype and got.shape == ref.shape, i
        assert rel_error(got, ref) < tol, i

    # And at least as close to exact float64 autograd as eager autograd in the same dtype is (ReLU
    # masks that flip under rounding put both some way off it in deep nets).
    def autograd_grads(dt):
        leaves = [t.detach().to(dt).requires_grad_() for t in [x] + ws + [b for b in bs if b is not None]]
        it = iter(leaves[1 + len(ws):])
        biases = [None if b is None else next(it) for b in bs]
        return torch.autograd.grad(eager(leaves[0], leaves[1:1 + len(ws)], biases, relu_last), leaves, gout.to(dt))

    exact, eager_grads = autograd_grads(torch.float64), autograd_grads(dtype)
    for i, (got, ref, theirs) in enumerate(zip(grads, exact, eager_grads)):
        assert rel_error(got, ref) <= max(tol, 2 * rel_error(theirs, ref)), i


@pytest.mark.parametrize("needs", ["input", "params", "weights_only"])
def test_training_computes_the_gradients_asked_for(needs):
    torch.manual_seed(8)
    x = torch.randn(300, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    ws, bs = make_mlp([64, 64, 32], torch.bfloat16)
    gout = torch.randn(300, 32, dtype=torch.float64).to(torch.bfloat16).cuda()
    x.requires_grad_(needs == "input")
    for w in ws:
        w.requires_grad_(needs != "input")
    for b in bs:
        b.requires_grad_(needs == "params")
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, False)
    out.backward(gout)
    assert (x.grad is not None) == (needs == "input")
    assert all((w.grad is not None) == (needs != "input") for w in ws)
    assert all((b.grad is not None) == (needs == "params") for b in bs)
    outputs = torch.ops.hypatia._fused_mlp_forward(x.detach(), ws, bs, False)
    gx, gws, gbs = reference_backward_rounded(gout, x, ws, [True, True], outputs, False)
    for t, ref in [(x, gx)] + list(zip(ws, gws)) + list(zip(bs, gbs)):
        if t.grad is not None:
            assert rel_error(t.grad, ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("relu_last", [False, True])
def test_training_nan_gradients_spread_as_in_eager(relu_last):
    torch.manual_seed(9)
    x = torch.randn(200, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    ws, bs = make_mlp([64, 64, 64, 64], torch.bfloat16)
    gout = torch.randn(200, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    gout[7, :] = float("nan")
    _, _, grads = narrow_grads(x, ws, bs, relu_last, gout)
    leaves = [t.detach().requires_grad_() for t in [x] + ws + bs]
    eager_grads = torch.autograd.grad(eager(leaves[0], leaves[1:4], leaves[4:], relu_last), leaves, gout)
    for got, ref in zip(grads, eager_grads):
        assert torch.equal(got.isnan(), ref.isnan())
    assert grads[0][7].isnan().any() and not grads[0][8:].isnan().any()


def test_training_zero_rows_and_batch_dims():
    ws, bs = make_mlp([64, 64, 32], torch.bfloat16)
    for shape in [(0, 64), (2, 0, 64), (3, 50, 64)]:
        torch.manual_seed(10)
        x = torch.randn(shape, dtype=torch.float64).to(torch.bfloat16).cuda()
        gout = torch.randn(shape[:-1] + (32,), dtype=torch.float64).to(torch.bfloat16).cuda()
        out, outputs, grads = narrow_grads(x, ws, bs, True, gout)
        assert out.shape == shape[:-1] + (32,) and grads[0].shape == shape
        gx, gws, gbs = reference_backward_rounded(gout, x, ws, [True, True], outputs, True)
        for got, ref in zip(grads, [gx] + gws + gbs):
            assert got.shape == ref.shape
            if ref.numel() and ref.abs().max() > 0:
                assert rel_error(got, ref) < TOLERANCE[torch.bfloat16]
            else:  # no rows: zero weight and bias gradients
                assert torch.count_nonzero(got) == 0


@pytest.mark.skipif(NARROW_DISABLED, reason="HYPATIA_DISABLE_NARROW_MLP is set")
def test_training_runs_the_narrow_kernels():
    torch.manual_seed(11)
    x = torch.randn(4096, 64, dtype=torch.float64).to(torch.bfloat16).cuda().requires_grad_()
    ws, bs = make_mlp([64, 64, 64, 64], torch.bfloat16)
    for p in ws + bs:
        p.requires_grad_()
    gout = torch.randn(4096, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    names = cuda_kernel_names(lambda: torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, False), [x] + ws + bs, gout))
    if names is None:
        pytest.skip("torch.profiler recorded no CUDA activity (CUPTI unavailable?)")
    assert sum(KERNEL_NAME in n for n in names) == 1, names
    assert sum(BACKWARD_KERNEL_NAME in n for n in names) == 1, names
    # No ATen ReLU-backward or sum kernels: the masks and bias sums are in the backward kernel.
    assert not any("at::native" in n and ("threshold" in n or "reduce_kernel" in n) for n in names), names


def test_opcheck_backward_op():
    torch.manual_seed(12)
    x = torch.randn(100, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    ws, bs = make_mlp([64, 64, 32], torch.bfloat16, "mixed")
    outputs = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, True)
    gout = torch.randn(100, 32, dtype=torch.float64).to(torch.bfloat16).cuda()
    for input_grad, params_grad in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(
            torch.ops.hypatia._fused_mlp_backward.default,
            (gout, x, ws, outputs, [True, False], True, input_grad, params_grad))
