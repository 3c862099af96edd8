"""The medium-MLP forward kernel's checks (ops/cuda/medium_mlp_kernel.cu), run by test_medium_mlp.py
in a subprocess whose environment has HYPATIA_MEDIUM_MLP=1 (the kernel wherever it applies) and
HYPATIA_DISABLE_NARROW_MLP=1 (so that it also takes the narrow shapes); `policy` runs without
HYPATIA_MEDIUM_MLP. Usage: medium_mlp_cases.py CHECK DTYPE."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)
from conftest import TOLERANCE, eager_mlp, make_mlp, rel_error, run_case_from_argv  # noqa: E402
from test_narrow_mlp import cuda_kernel_names, reference_rounded  # noqa: E402

KERNEL = "medium_mlp_forward_kernel"
# (rows, widths): ragged last blocks, one row, widths below 256 that leave part of the m64n256 tile
# unused (96, 160, 224), the narrowest widths (input 16, outputs 32), many layers; 40000 rows give
# CTAs three row blocks each, through a ring that runs ahead into the next block (also where the
# last layer has fewer than three k-slices, and the next block's input waits for all of them).
# Layers wider than 256 (two tiles, the upper first; a 320-wide one whose upper tile is ragged; a
# last one over several blocks a CTA, which frees act for the next input after its lower tile) and
# 512-wide inputs (8 k-slices, 8 panels of act to free, the consumers in step: the ring holds 3, over
# several blocks a CTA at 20000 rows); input widths that are not a
# whole number of 16 bytes (DLRM's 13 features, 7), read element by element. Inputs of at most 16
# columns into outputs of at most 64 take the kernel's narrow-ends instance (one k16 step for the
# first layer, m64n64 for the last): two layers, three, and five (several middle layers, with turns),
# outputs of 32 and 64, an input of one column.
SHAPES = [(1000, [256, 256, 256, 256, 256]), (777, [64, 256, 160, 64]), (1, [32, 96, 32]),
          (130, [16, 224, 32]), (4099, [256, 256, 96]), (300, [64] * 9), (64, [128, 32]),
          (40000, [256, 256, 64]), (40000, [64, 32]), (40000, [16, 64, 32]),
          (1000, [13, 512, 256, 64]), (40000, [13, 512, 256, 64]), (777, [16, 320, 128]),
          (300, [256, 512, 256]), (130, [512, 256, 64]), (20000, [512, 256, 64]), (5, [7, 64, 32]),
          (40000, [16, 256, 128, 256, 64]), (3000, [1, 256, 256, 256, 32]), (40000, [64, 256, 320])]


def narrow_ends(widths):
    """Whether the kernel's narrow-ends instance takes these widths."""
    return len(widths) >= 3 and widths[0] <= 16 and widths[-1] <= 64


def ran_narrow_ends(names):
    """Whether the kernels named include the narrow-ends instance (demangled or mangled)."""
    return any(KERNEL in n and (", true>" in n or "Lb1E" in n) for n in names)


def forward(dtype):
    """Every shape, relu_last or not, every bias pattern: against float64 with eager's per-layer
    rounding and against eager; the kernel is what ran."""
    for i, (rows, widths) in enumerate(SHAPES):
        for relu_last in (False, True):
            for bias_pattern in ("all", "none", "mixed"):
                torch.manual_seed(i)
                x = torch.randn(rows, widths[0], dtype=torch.float64).to(dtype).cuda()
                ws, bs = make_mlp(widths, dtype, bias_pattern, device="cuda")
                out = torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)
                ref = reference_rounded(x, ws, bs, relu_last)
                assert out.shape == ref.shape and out.dtype == dtype
                err, eager_err = rel_error(out, ref), rel_error(out, eager_mlp(x, ws, bs, relu_last))
                assert err < TOLERANCE[dtype] and eager_err < TOLERANCE[dtype], (rows, widths, err, eager_err)
        # The kernel alone; beside it, for a ragged input width, the first weight's zero columns.
        names = cuda_kernel_names(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False))
        assert names is None or any(KERNEL in n for n in names) and (
            widths[0] % 8 != 0 or all(KERNEL in n for n in names)), names
        assert names is None or ran_narrow_ends(names) == narrow_ends(widths), (widths, names)
        print(f"forward {dtype} {rows} {widths}: ok", flush=True)


def fallback(dtype):
    """Operands the kernel does not take fall back to the per-layer path, with the same results: an
    output width not a multiple of 32, a layer wider than 512, one wider than 256 reading more than
    256, a transposed weight; and ones it takes: a bias 2 bytes off a 4-byte boundary, an input width
    not a multiple of 16, a layer of two tiles, an input that is a strided view (as eager, whatever
    path)."""
    torch.manual_seed(4)
    cases = {"misaligned bias": [64, 256, 64], "width 48": [64, 48, 64], "input 24": [24, 64, 64],
             "width 288": [64, 288, 64], "width 544": [64, 544, 64], "width 288 after 288": [64, 288, 288, 64],
             "transposed weight": [64, 256, 64], "strided input": [64, 256, 64]}
    taken = ("misaligned bias", "input 24", "width 288")
    for case, widths in cases.items():
        x = torch.randn(300, widths[0], dtype=torch.float64).to(dtype).cuda()
        ws, bs = make_mlp(widths, dtype, device="cuda")
        if case == "misaligned bias":
            bs[0] = torch.cat([bs[0][:1], bs[0]])[1:]
            assert bs[0].data_ptr() % 4 == 2 and bs[0].is_contiguous()
        elif case == "transposed weight":
            ws[0] = ws[0].t().contiguous().t()
        elif case == "strided input":
            x = torch.cat([x, x], dim=1)[:, ::2]
            assert not x.is_contiguous()
        fn = lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, True)  # noqa: E731
        out = fn()
        assert rel_error(out, reference_rounded(x, ws, bs, True)) < TOLERANCE[dtype], case
        names = cuda_kernel_names(fn)
        ran = names is not None and any(KERNEL in n for n in names)
        assert names is None or case == "strided input" or ran == (case in taken), (case, names)
        print(f"fallback {dtype} {case}: ok", flush=True)


def nonfinite(dtype):
    """A NaN in a row makes that row's output NaN through every ReLU (torch.relu keeps NaN); an Inf
    gives what eager gives."""
    torch.manual_seed(5)
    widths = [64, 256, 128]
    x = torch.randn(300, widths[0], dtype=torch.float64).to(dtype).cuda()
    x[3, 7] = float("nan")
    x[10, 0] = float("inf")
    ws, bs = make_mlp(widths, dtype, device="cuda")
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, True)
    eager = eager_mlp(x, ws, bs, True)
    assert out[3].isnan().all()
    assert torch.equal(out.isnan(), eager.isnan()) and torch.equal(out.isinf(), eager.isinf())
    finite = eager.isfinite()
    assert rel_error(out[finite], eager[finite]) < TOLERANCE[dtype]
    print(f"nonfinite {dtype}: ok", flush=True)


def training(dtype):
    """In training the kernel writes every hidden output (by TMA, from shared memory), which the
    per-layer backward reads: the gradients match float64's; a 3-D input keeps its batch dims; 40000
    rows give CTAs several row blocks, each storing every layer; DLRM's bottom MLP stores its 512-wide
    layer in two tiles."""
    for i, (shape, widths) in enumerate((((4, 250), [128, 256, 256, 64]), ((40000,), [256, 256, 256, 96]),
                                         ((3000,), [13, 512, 256, 64]))):
        torch.manual_seed(9 + i)
        x = torch.randn(*shape, widths[0], dtype=torch.float64).to(dtype).cuda().requires_grad_()
        ws, bs = make_mlp(widths, dtype, device="cuda")
        leaves = [x] + [w.requires_grad_() for w in ws] + [b.requires_grad_() for b in bs]
        gout = torch.randn(*shape, widths[-1], dtype=torch.float64).to(dtype).cuda()
        out = torch.ops.hypatia.fused_mlp(x, ws, bs, False)
        assert out.shape == (*shape, widths[-1])
        got = torch.autograd.grad(out, leaves, gout)
        xd = x.detach().double().requires_grad_()
        wd = [w.detach().double().requires_grad_() for w in ws]
        bd = [b.detach().double().requires_grad_() for b in bs]
        want = torch.autograd.grad(eager_mlp(xd, wd, bd, False), [xd] + wd + bd, gout.double())
        for g, r in zip(got, want):
            assert rel_error(g, r) < 5e-2, rel_error(g, r)  # ReLU masks that flip under rounding (docs/perf)
        names = cuda_kernel_names(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False))
        assert names is None or any(KERNEL in n for n in names), names
        print(f"training {dtype} {shape} {widths}: ok", flush=True)


def policy(dtype):
    """Without HYPATIA_MEDIUM_MLP the kernel runs where it measured faster than the per-layer path:
    three layers or more, unless the input is wider than 256; two layers, or an input that wide, up to
    three row blocks of 128 an SM; never one layer. Elsewhere, and on GPUs other than the H100 family,
    the per-layer path runs, with the same results."""
    torch.manual_seed(10)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    hopper = torch.cuda.get_device_capability(0)[0] == 9
    cases = [(300, [256] * 4, True), (300, [16, 256, 256, 64], True), (300, [256] * 3, True),
             (128 * 3 * sms, [256] * 3, True), (128 * 3 * sms + 1, [256] * 3, False), (300, [256, 256], False),
             (128 * 3 * sms, [512, 256, 256, 256], True), (128 * 3 * sms + 1, [512, 256, 256, 256], False),
             (128 * 3 * sms + 1, [13, 512, 256, 64], True), (128 * 3 * sms + 1, [256, 512, 256, 64], True)]
    for rows, widths, expected in cases:
        x = torch.randn(rows, widths[0], dtype=torch.float64).to(dtype).cuda()
        ws, bs = make_mlp(widths, dtype, device="cuda")
        fn = lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False)  # noqa: E731
        assert rel_error(fn(), reference_rounded(x, ws, bs, False)) < TOLERANCE[dtype], (rows, widths)
        names = cuda_kernel_names(fn)
        assert names is None or any(KERNEL in n for n in names) == (expected and hopper), (rows, widths, names)
        print(f"policy {dtype} {rows} {widths}: ok", flush=True)


if __name__ == "__main__":
    run_case_from_argv({"forward": forward, "fallback": fallback, "nonfinite": nonfinite, "training": training,
                        "policy": policy})
