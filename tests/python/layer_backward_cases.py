"""The one-pass layer backward's checks (ops/cuda/layer_backward_kernel.cu), run by
test_layer_backward.py in a subprocess whose environment has HYPATIA_LAYER_BACKWARD unset (the kernel
wherever it applies; `off` has it "0"), HYPATIA_DISABLE_NARROW_MLP=1 and
HYPATIA_MEDIUM_MLP=0 (the per-layer path around it) and HYPATIA_CUBLASLT_AUTOTUNE=0 (no result
depends on timings). Usage: layer_backward_cases.py CHECK DTYPE."""
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)
from conftest import eager_mlp, make_mlp, rel_error, run_case_from_argv  # noqa: E402
from test_narrow_mlp import cuda_kernel_names  # noqa: E402

KERNEL = "layer_backward_kernel"
BOTTOM_MIN_ROWS = 8192  # the bottom layer is taken from this many rows (layer_backward_kernel.cu)
# (leading dims, widths, bias pattern, relu_last). The kernel takes every 256 -> 256 layer above the
# bottom one (through the ReLU below), and the bottom one (no mask) from BOTTOM_MIN_ROWS rows: ragged
# row counts (a last block of 1 and of 63 rows), one row, a single block, groups with odd and even
# block counts (20000 rows: 313 blocks over the resident groups), N-D inputs, layers without a bias
# (then the layer above's sum is the only one asked for), relu_last, a 256-wide layer above a narrower
# or wider one (not taken), a bottom layer just above and below its row bound.
SHAPES = [((65,), [256, 256, 256, 64], "all", False),
          ((4095,), [128, 256, 256, 256], "mixed", False),
          ((1,), [256, 256, 256], "all", True),
          ((64,), [64, 256, 256, 32], "none", False),
          ((3, 50), [256, 256, 256, 256, 256], "mixed", True),
          ((20000,), [256, 256, 256, 256], "all", False),
          ((777,), [256, 512, 256, 256, 128], "all", False),
          ((8193,), [256, 256, 64], "mixed", False),
          ((2, 4096), [256, 256, 256], "all", True),
          ((8191,), [256, 256, 256], "all", False)]


def fused_layers(widths, rows):
    """The layers whose backward the kernel takes: 256 -> 256, the bottom one from BOTTOM_MIN_ROWS rows."""
    return sum(1 for i in range(len(widths) - 1)
               if widths[i] == widths[i + 1] == 256 and (i > 0 or rows >= BOTTOM_MIN_ROWS))


def training_step(x, ws, bs, relu_last, gout):
    """fused_mlp's forward and every gradient (the input's where it requires one, weights, biases)."""
    leaves = [x] * x.requires_grad + ws + [b for b in bs if b is not None]
    return torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), leaves, gout)


def reference(x, ws, bs, relu_last, gout, dtype):
    """Eager's gradients in `dtype` and in float64 on the same (rounded) operands."""
    def run(cast):
        xd = cast(x).requires_grad_(x.requires_grad)
        wd = [cast(w).requires_grad_() for w in ws]
        bd = [None if b is None else cast(b).requires_grad_() for b in bs]
        leaves = [xd] * x.requires_grad + wd + [b for b in bd if b is not None]
        return torch.autograd.grad(eager_mlp(xd, wd, bd, relu_last), leaves, cast(gout))
    return run(lambda t: t.detach().clone()), run(lambda t: t.detach().double())


def operands(lead, widths, bias, dtype, seed):
    torch.manual_seed(seed)
    x = torch.randn(*lead, widths[0], dtype=torch.float64).to(dtype).cuda().requires_grad_()
    ws, bs = make_mlp(widths, dtype, bias, device="cuda")
    ws = [w.requires_grad_() for w in ws]
    bs = [None if b is None else b.requires_grad_() for b in bs]
    gout = torch.randn(*lead, widths[-1], dtype=torch.float64).to(dtype).cuda()
    return x, ws, bs, gout


def check_gradients(got, eager, exact, dtype, label):
    """Each gradient within twice eager's own error against float64, or the dtype's bar (a ReLU input
    that rounds to the other side of 0 moves eager's gradients as far as ours)."""
    for j, (g, e, ref) in enumerate(zip(got, eager, exact)):
        assert g.shape == ref.shape and g.dtype == dtype, (label, j, g.shape, g.dtype)
        err, eager_err = rel_error(g, ref), rel_error(e, ref)
        assert err <= max(2e-2, 2 * eager_err), (label, j, err, eager_err)


def kernel_launches(fn):
    names = cuda_kernel_names(fn)
    return None if names is None else sum(KERNEL in n for n in names)


def gradients(dtype):
    """Every gradient of every shape against float64; the kernel ran once for each layer it takes."""
    for i, (lead, widths, bias, relu_last) in enumerate(SHAPES):
        x, ws, bs, gout = operands(lead, widths, bias, dtype, i)
        got = training_step(x, ws, bs, relu_last, gout)
        check_gradients(got, *reference(x, ws, bs, relu_last, gout, dtype), dtype, (lead, widths))
        launches = kernel_launches(lambda: training_step(x, ws, bs, relu_last, gout))
        assert launches is None or launches == fused_layers(widths, math.prod(lead)), (lead, widths, launches)
        print(f"gradients {dtype} {lead} {widths}: ok", flush=True)


def noncontiguous(dtype):
    """An input that is a transposed view, an incoming gradient that is one too, and a weight that is
    a transposed leaf (the kernel's TMA reads dense copies)."""
    x, ws, bs, gout = operands((8200,), [256, 256, 256, 64], "all", dtype, 7)
    xt = x.detach().t().contiguous().t().requires_grad_()
    gout_t = gout.t().contiguous().t()
    ws_t = [ws[0], ws[1].detach().t().contiguous().t().requires_grad_(), ws[2]]
    assert not ws_t[1].is_contiguous()
    got = training_step(xt, ws_t, bs, False, gout_t)
    check_gradients(got, *reference(x, ws, bs, False, gout, dtype), dtype, "noncontiguous")
    assert kernel_launches(lambda: training_step(xt, ws_t, bs, False, gout_t)) in (None, 2)
    print(f"noncontiguous {dtype}: ok", flush=True)


def nonfinite(dtype):
    """NaN and Inf flow as in eager: a NaN in the input gives rows of NaN hidden outputs, through whose
    threshold_backward the gradient passes (and a NaN gradient where the ReLU passed nothing is 0); an
    Inf in the incoming gradient gives Inf or NaN where eager's does."""
    x, ws, bs, gout = operands((8300,), [256, 256, 256, 256, 64], "all", dtype, 3)
    with torch.no_grad():
        x[5, 7] = float("nan")
        gout[11, 3] = float("inf")
    got = training_step(x, ws, bs, False, gout)
    eager, _ = reference(x, ws, bs, False, gout, dtype)
    for j, (g, e) in enumerate(zip(got, eager)):
        for mask in (torch.isnan, torch.isposinf, torch.isneginf):
            assert torch.equal(mask(g), mask(e)), (j, mask.__name__)
        finite = e.isfinite() & g.isfinite()
        assert not finite.any() or rel_error(g[finite], e[finite]) < 2e-2, j
    assert any(g.isnan().any() for g in got) and any(g.isinf().any() for g in got)
    assert kernel_launches(lambda: training_step(x, ws, bs, False, gout)) in (None, 3)
    print(f"nonfinite {dtype}: ok", flush=True)


def weights_only(dtype):
    """An input that needs no gradient (a model's data): the bottom layer's pass gives dw and db alone
    (from BOTTOM_MIN_ROWS rows; below, its weight gradient's GEMM)."""
    for i, (lead, widths) in enumerate((((8255,), [256, 256, 256, 64]), ((8192,), [256, 256]),
                                        ((4095,), [256, 256, 256, 64]))):
        x, ws, bs, gout = operands(lead, widths, "all", dtype, 20 + i)
        x = x.detach()
        got = training_step(x, ws, bs, False, gout)
        check_gradients(got, *reference(x, ws, bs, False, gout, dtype), dtype, (lead, widths))
        launches = kernel_launches(lambda: training_step(x, ws, bs, False, gout))
        assert launches is None or launches == fused_layers(widths, math.prod(lead)), (lead, widths, launches)
    print(f"weights_only {dtype}: ok", flush=True)


def deterministic(dtype):
    """The groups' partial sums are added in a fixed order: two runs agree bit for bit."""
    x, ws, bs, gout = operands((20000,), [256, 256, 256, 256], "all", dtype, 11)
    first, second = training_step(x, ws, bs, False, gout), training_step(x, ws, bs, False, gout)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    print(f"deterministic {dtype}: ok", flush=True)


def declined(dtype):
    """What the kernel does not take runs the per-layer path, with the same results: float32, and the
    gradient of the input alone (no weight gradient to fuse with)."""
    x, ws, bs, gout = operands((300,), [256, 256, 256, 64], "all", torch.float32, 4)
    got = training_step(x, ws, bs, False, gout)
    check_gradients(got, *reference(x, ws, bs, False, gout, torch.float32), torch.float32, "float32")
    assert kernel_launches(lambda: training_step(x, ws, bs, False, gout)) in (None, 0)

    x, ws, bs, gout = operands((300,), [256, 256, 256, 64], "all", dtype, 5)
    eager, exact = reference(x, ws, bs, False, gout, dtype)

    def input_only():
        return torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, [w.detach() for w in ws],
                                                               [b.detach() for b in bs], False), [x], gout)
    check_gradients(input_only(), eager[:1], exact[:1], dtype, "input only")
    assert kernel_launches(input_only) in (None, 0)
    print(f"declined {dtype}: ok", flush=True)


def off(dtype):
    """HYPATIA_LAYER_BACKWARD=0: never, with the same results."""
    x, ws, bs, gout = operands((4095,), [256, 256, 256, 64], "all", dtype, 6)
    got = training_step(x, ws, bs, False, gout)
    check_gradients(got, *reference(x, ws, bs, False, gout, dtype), dtype, "off")
    assert kernel_launches(lambda: training_step(x, ws, bs, False, gout)) in (None, 0)
    print(f"off {dtype}: ok", flush=True)


if __name__ == "__main__":
    run_case_from_argv({"gradients": gradients, "weights_only": weights_only, "noncontiguous": noncontiguous,
                        "nonfinite": nonfinite, "deterministic": deterministic, "declined": declined, "off": off})
