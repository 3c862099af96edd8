"""The fused input-gradient kernel's checks (ops/cuda/relu_input_grad_kernel.cu), run by
test_fused_input_grad.py in a subprocess whose environment has HYPATIA_FUSED_INPUT_GRAD=1 (the
kernel wherever it applies, untimed), HYPATIA_DISABLE_NARROW_MLP=1 (so that narrow MLPs take the
per-layer backward too) and HYPATIA_CUBLASLT_LOG=1 (one line per problem, naming the choice).
Usage: fused_input_grad_cases.py CHECK [DTYPE]."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)
from conftest import rel_error, run_case_from_argv  # noqa: E402

# (leading dims of the input, widths, which layers have a bias, relu_last): ragged row counts
# (4101: a partial tile of rows), several tiles of a hidden width, one narrower than a tile, N-D
# inputs, layers without a bias, a hidden width that is not a multiple of 8 (its layer below runs
# the unfused way: the kernel's rows must be 16 bytes apart).
SHAPES = [((4101,), [512, 256, 128, 64], [True, True, True], False),
          ((777,), [64, 1024, 1024, 8], [True, False, True], False),
          ((3, 50), [256, 264, 64, 32], [False, True, True], True),
          ((1000,), [128, 300, 100, 16], [True, True, True], False),
          ((64,), [32, 72, 40], [True, True], True)]


def operands(lead, widths, has_bias, dtype, seed):
    """x, weights and biases drawn in float64 from `seed` (weights scaled so that each layer's output
    stays O(1)), rounded to `dtype` on the GPU."""
    torch.manual_seed(seed)
    x = torch.randn(*lead, widths[0], dtype=torch.float64)
    ws = [torch.randn(n, k, dtype=torch.float64) * (2 / k) ** 0.5 for k, n in zip(widths, widths[1:])]
    bs = [torch.randn(n, dtype=torch.float64) * 0.1 if b else None for n, b in zip(widths[1:], has_bias)]
    return (x.to(dtype).cuda(), [w.to(dtype).cuda() for w in ws],
            [None if b is None else b.to(dtype).cuda() for b in bs])


def eager_mlp(x, ws, bs, relu_last):
    for i, (w, b) in enumerate(zip(ws, bs)):
        x = F.linear(x, w, b)
        if i + 1 < len(ws) or relu_last:
            x = F.relu(x)
    return x


def grads(fn, x, ws, bs, relu_last, gout):
    leaves = [t.detach().requires_grad_() for t in [x] + ws + [b for b in bs if b is not None]]
    x_, rest = leaves[0], leaves[1:]
    ws_ = rest[:len(ws)]
    it = iter(rest[len(ws):])
    bs_ = [None if b is None else next(it) for b in bs]
    return torch.autograd.grad(fn(x_, ws_, bs_, relu_last), leaves, gout)


def ours(x, ws, bs, relu_last):
    return torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)


def gradients(dtype):
    """Every gradient of every shape against float64 on the same (rounded) operands, within twice
    eager's own error or the dtype's bar (a ReLU input that rounds to the other side of 0 moves eager's
    gradients as far from float64 as ours)."""
    for i, (lead, widths, has_bias, relu_last) in enumerate(SHAPES):
        x, ws, bs = operands(lead, widths, has_bias, dtype, i)
        gout = torch.randn(*lead, widths[-1], dtype=torch.float64, device="cuda")
        exact = grads(eager_mlp, x.double(), [w.double() for w in ws], [None if b is None else b.double() for b in bs],
                      relu_last, gout)
        eager = grads(eager_mlp, x, ws, bs, relu_last, gout.to(dtype))
        got = grads(ours, x, ws, bs, relu_last, gout.to(dtype))
        for j, (g, e, ref) in enumerate(zip(got, eager, exact)):
            assert g.shape == ref.shape and g.dtype == dtype, (i, j, g.shape, g.dtype)
            err, eager_err = rel_error(g, ref), rel_error(e, ref)
            assert err <= max(2e-2, 2 * eager_err), (i, j, err, eager_err)
        print(f"gradients {dtype} {lead} {widths}: ok", flush=True)


def noncontiguous(dtype):
    """An input that is a transposed view, and an incoming gradient that is one too."""
    x, ws, bs = operands((512,), [256, 512, 256, 64], [True, True, True], dtype, 7)
    xt = x.t().contiguous().t()
    gout = torch.randn(64, 512, dtype=torch.float64, device="cuda").t()
    exact = grads(eager_mlp, x.double(), [w.double() for w in ws], [b.double() for b in bs], False, gout)
    eager = grads(eager_mlp, x, ws, bs, False, gout.to(dtype))
    got = grads(ours, xt, ws, bs, False, gout.to(dtype))
    for j, (g, e, ref) in enumerate(zip(got, eager, exact)):
        assert rel_error(g, ref) <= max(2e-2, 2 * rel_error(e, ref)), j
    print(f"noncontiguous {dtype}: ok", flush=True)


def nonfinite(dtype):
    """NaN and Inf flow as in eager: a NaN in the input gives a row of NaN hidden outputs, through
    whose threshold_backward the gradient passes; an Inf in the incoming gradient gives Inf or NaN
    where eager's does."""
    x, ws, bs = operands((300,), [256, 512, 256, 64], [True, True, True], dtype, 3)
    x[5, 7] = float("nan")
    gout = torch.randn(300, 64, dtype=torch.float64, device="cuda").to(dtype)
    gout[11, 3] = float("inf")
    got = grads(ours, x, ws, bs, False, gout)
    eager = grads(eager_mlp, x, ws, bs, False, gout)
    for j, (g, e) in enumerate(zip(got, eager)):
        for mask in (torch.isnan, torch.isposinf, torch.isneginf):
            assert torch.equal(mask(g), mask(e)), (j, mask.__name__)
    assert any(g.isnan().any() for g in got) and any(g.isinf().any() for g in got)
    print(f"nonfinite {dtype}: ok", flush=True)


if __name__ == "__main__":
    run_case_from_argv({"gradients": gradients, "noncontiguous": noncontiguous, "nonfinite": nonfinite})
