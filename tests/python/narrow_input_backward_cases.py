"""The narrow-input backward kernel's checks (ops/cuda/narrow_input_backward_kernel.cu), run by
test_narrow_input_backward.py in a subprocess with HYPATIA_DISABLE_NARROW_MLP=1 (so that every shape
takes the per-layer backward, whose bottom layer the kernel runs) and HYPATIA_NARROW_INPUT_BACKWARD
as the test sets it ("0": the per-layer path everywhere, which must pass the same checks).
Usage: narrow_input_backward_cases.py CHECK DTYPE."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)
from conftest import TOLERANCE, make_mlp, rel_error, run_case_from_argv  # noqa: E402
from test_narrow_mlp import cuda_kernel_names  # noqa: E402

KERNEL = "narrow_input_backward_kernel"
ENABLED = os.environ.get("HYPATIA_NARROW_INPUT_BACKWARD") != "0"


def blocks_past_the_grid():
    """Rows for 2 x SMs + 3 of the kernel's 32-row blocks: with its one CTA an SM, CTAs 0-2 take three
    (their first slot again) and the others two; were it two an SM, CTAs 0-2 would take two."""
    return 32 * (2 * torch.cuda.get_device_properties(0).multi_processor_count + 3)


# (rows, widths): one row; ragged last blocks; more blocks than CTAs; DLRM's bottom MLP with many
# blocks a CTA; input widths 1, 7, 8, 13 and 16; outputs of one, two and four 128-row tiles, and
# ones that leave part of the tile (200, 392).
SHAPES = [(1, [13, 512, 64]), (130, [13, 512, 256, 64]), (None, [13, 512, 64]), (40000, [13, 512, 256, 64]),
          (777, [1, 128, 32]), (300, [16, 200, 64]), (3000, [8, 256, 256]), (1000, [13, 392, 64]),
          (500, [7, 8, 16])]


def saved_outputs(x, ws, bs, relu_last):
    """What fused_mlp's training forward saves: the outputs of the layers a ReLU follows (eager's)."""
    h, saved = x, []
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = torch.nn.functional.linear(h, w, b)
        if i + 1 < len(ws) or relu_last:
            h = torch.relu(h)
            saved.append(h)
    return saved


def reference_backward(gout, x, ws, saved, has_bias, relu_last, dtype):
    """The per-layer backward in float64 from the same saved outputs, each layer's input gradient
    rounded to `dtype` as the library stores it: [grad_weights..., grad_biases (has_bias)..., grad_input]."""
    def relu_backward(g, out):
        return torch.where(out.double() <= 0, torch.zeros_like(g), g)  # a NaN output passes g

    layers = len(ws)
    g = gout.double()
    if relu_last:
        g = relu_backward(g, saved[-1])
    gws, gbs = [None] * layers, [None] * layers
    for i in reversed(range(layers)):
        h = x if i == 0 else saved[i - 1]
        gws[i] = g.t() @ h.double()
        gbs[i] = g.sum(0)
        if i > 0:
            g = relu_backward((g @ ws[i].double()).to(dtype).double(), saved[i - 1])
    gx = g @ ws[0].double()
    return gws + [gb for gb, hb in zip(gbs, has_bias) if hb] + [gx]


def check_backward(x, ws, bs, relu_last, input_grad, params_grad, label, *, expect_kernel, gout=None, saved=None):
    """_fused_mlp_backward against reference_backward; the kernel ran where expected."""
    dtype = x.dtype
    saved = saved_outputs(x, ws, bs, relu_last) if saved is None else saved
    if gout is None:
        # Later rows weigh more, so that a row block left out anywhere moves the result past the bar.
        gout = torch.randn(x.shape[0], ws[-1].shape[0], dtype=torch.float64, device=x.device)
        gout = (gout * torch.linspace(1, 10, x.shape[0], dtype=torch.float64, device=x.device)[:, None]).to(dtype)
    has_bias = [b is not None for b in bs]

    def call():
        return torch.ops.hypatia._fused_mlp_backward(gout, x, ws, saved, has_bias, relu_last, input_grad, params_grad)

    got = call()
    want = reference_backward(gout, x, ws, saved, has_bias, relu_last, dtype)
    if not params_grad:
        want = want[-1:]
    if not input_grad:
        want = want[:-1]
    assert len(got) == len(want), label
    for j, (g, r) in enumerate(zip(got, want)):
        assert g.shape == r.shape and g.dtype == dtype, (label, j, g.shape, r.shape)
        assert torch.equal(g.isnan().cpu(), r.isnan().cpu()) and torch.equal(g.isinf().cpu(), r.isinf().cpu()), (label, j)
        finite = r.isfinite()
        if finite.any():
            err = rel_error(g[finite], r[finite])
            assert err < TOLERANCE[dtype], (label, j, err)
    names = cuda_kernel_names(call)
    assert names is None or any(KERNEL in n for n in names) == (expect_kernel and ENABLED), (label, names)


def shapes(dtype):
    """Every shape, relu_last or not, every bias pattern and choice of gradients."""
    for i, (rows, widths) in enumerate(SHAPES):
        rows = blocks_past_the_grid() if rows is None else rows
        for relu_last in (False, True):
            for bias_pattern in ("all", "none", "mixed"):
                for input_grad, params_grad in ((True, True), (True, False), (False, True)):
                    torch.manual_seed(i)
                    x = torch.randn(rows, widths[0], dtype=torch.float64).to(dtype).cuda()
                    ws, bs = make_mlp(widths, dtype, bias_pattern, device="cuda")
                    check_backward(x, ws, bs, relu_last, input_grad, params_grad,
                                   (rows, widths, relu_last, bias_pattern, input_grad, params_grad), expect_kernel=True)
        print(f"shapes {dtype} {rows} {widths}: ok", flush=True)


def operands(dtype):
    """A strided input and a transposed first weight (read through their strides); and operands the
    kernel does not take, left to the per-layer path: 17 input features, 520 outputs, float32, a
    saved output that is a strided view."""
    torch.manual_seed(20)
    for case in ("strided input", "transposed weight", "input 17", "width 520", "float32", "strided saved"):
        widths = {"input 17": [17, 256, 64], "width 520": [13, 520, 64]}.get(case, [13, 512, 64])
        case_dtype = torch.float32 if case == "float32" else dtype
        x = torch.randn(2000, widths[0], dtype=torch.float64).to(case_dtype).cuda()
        ws, bs = make_mlp(widths, case_dtype, device="cuda")
        saved = None
        if case == "strided input":
            x = torch.cat([x, x], dim=1)[:, ::2]
            assert not x.is_contiguous()
        elif case == "transposed weight":
            ws[0] = ws[0].t().contiguous().t()
        elif case == "strided saved":
            saved = [torch.cat([s, s], dim=1)[:, ::2] for s in saved_outputs(x, ws, bs, False)]
        taken = case in ("strided input", "transposed weight")
        check_backward(x, ws, bs, False, True, True, case, expect_kernel=taken, saved=saved)
        print(f"operands {dtype} {case}: ok", flush=True)


def nonfinite(dtype):
    """NaN in the input and in a saved output (threshold_backward passes the gradient there), Inf in
    the upstream gradient: NaN and Inf where the float64 reference has them."""
    torch.manual_seed(21)
    widths = [13, 512, 64]
    x = torch.randn(3000, widths[0], dtype=torch.float64).to(dtype).cuda()
    ws, bs = make_mlp(widths, dtype, device="cuda")
    saved = saved_outputs(x, ws, bs, False)
    x[3, 5] = float("nan")
    saved[0][7] = float("nan")
    gout = torch.randn(3000, widths[-1], dtype=torch.float64).to(dtype).cuda()
    gout[11, 2] = float("inf")
    check_backward(x, ws, bs, False, True, True, "nonfinite", expect_kernel=True, gout=gout, saved=saved)
    print(f"nonfinite {dtype}: ok", flush=True)


def training(dtype):
    """Through autograd: fused_mlp's gradients (a 3-D input too) against float64 from the outputs its
    training forward saves, and the kernel in the backward."""
    for i, (shape, widths, relu_last) in enumerate((((4, 250), [13, 512, 256, 64], True), ((5000,), [13, 512, 64], False))):
        torch.manual_seed(30 + i)
        x = torch.randn(*shape, widths[0], dtype=torch.float64).to(dtype).cuda().requires_grad_()
        ws, bs = make_mlp(widths, dtype, device="cuda")
        leaves = [x] + [w.requires_grad_() for w in ws] + [b.requires_grad_() for b in bs]
        gout = torch.randn(*shape, widths[-1], dtype=torch.float64).to(dtype).cuda()

        def step():
            return torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), leaves, gout)

        got = step()
        with torch.no_grad():
            outputs = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, relu_last)
        saved = [o.reshape(-1, o.shape[-1]) for o in outputs[:len(ws) if relu_last else len(ws) - 1]]
        want = reference_backward(gout.reshape(-1, widths[-1]), x.detach().reshape(-1, widths[0]), ws, saved,
                                  [True] * len(ws), relu_last, dtype)
        want = [want[-1].reshape(x.shape)] + want[:-1]  # the leaves' order: input, weights, biases
        for j, (g, r) in enumerate(zip(got, want)):
            assert g.shape == r.shape and rel_error(g, r) < TOLERANCE[dtype], (shape, widths, j, rel_error(g, r))
        names = cuda_kernel_names(step)
        assert names is None or any(KERNEL in n for n in names) == ENABLED, names
        print(f"training {dtype} {shape} {widths}: ok", flush=True)


if __name__ == "__main__":
    run_case_from_argv({"shapes": shapes, "operands": operands, "nonfinite": nonfinite, "training": training})
