"""Host time of one of issue 39's MLPs at 64 rows (the GPU work negligible), split into its parts:
the whole forward+backward through autograd (as bench_ops.py calls it), autograd's own cost
(autograd.grad of x * 1), the private forward and backward ops called directly, and the ATen
calls the ragged input width costs (padding the first weight, cutting a padded gradient) beside
a plain launch, by scripts/profile_ops.py's host_us_per_call (median of 5 loops, synchronized at
each loop's end). Usage: python3 docs/perf/h200/host_parts.py [ROW ...] (from the repository root)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from profile_ops import host_us_per_call  # noqa: E402  (and the library, which profile_ops loads)

SHAPES = {"dlrm-bottom": (13, 512, 256, 64), "mlp-256x4": (256,) * 5, "mlp-1024x2": (1024,) * 3,
          "mlp-512x4": (512,) * 5, "mlp-1024x3": (1024,) * 4}
RELU_LAST = {"dlrm-bottom"}


def make_row(name, rows=64):
    """Row `name`'s leaves (input, weights, biases; bf16, all requiring grad), an upstream gradient
    and whether ReLU follows the last layer."""
    widths, dev, dt = SHAPES[name], "cuda", torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(rows, widths[0], device=dev, dtype=dt, requires_grad=True)
    ws = [(torch.randn(o, i, device=dev, dtype=dt) / i ** 0.5).requires_grad_() for i, o in zip(widths, widths[1:])]
    bs = [(torch.randn(o, device=dev, dtype=dt) * 0.1).requires_grad_() for o in widths[1:]]
    gout = torch.randn(rows, widths[-1], device=dev, dtype=dt)
    return x, ws, bs, gout, name in RELU_LAST


def op_calls(x, ws, bs, gout, relu_last):
    """The library's private forward op, and its backward op on the saved outputs of one forward
    (input and parameter gradients), each called alone."""
    forward = lambda: torch.ops.hypatia._fused_mlp_forward(x, ws, bs, relu_last)  # noqa: E731
    with torch.no_grad():
        outputs = forward()
    saved = list(outputs if relu_last else outputs[:-1])
    backward = lambda: torch.ops.hypatia._fused_mlp_backward(  # noqa: E731
        gout, x, ws, saved, [True] * len(ws), relu_last, True, True)
    return forward, backward


def row_calls(name):
    x, ws, bs, gout, relu_last = make_row(name)
    leaves = [x] + ws + bs
    forward, backward = op_calls(x, ws, bs, gout, relu_last)
    ones = torch.ones_like(x)
    hyp = lambda: torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), leaves, gout)  # noqa: E731
    return [
        (f"{name} fwd+bwd through autograd", hyp, True),
        (f"{name} fused_mlp forward, autograd recording", lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), True),
        ("autograd.grad of x * 1", lambda: torch.autograd.grad(x * 1, [x], ones), True),
        (f"{name} _fused_mlp_forward", forward, False),
        (f"{name} _fused_mlp_backward (input and parameter grads)", backward, False),
    ]


def main():
    names = sys.argv[1:] or ["dlrm-bottom", "mlp-256x4", "mlp-1024x2"]
    w = torch.randn(512, 13, device="cuda", dtype=torch.bfloat16)
    g16 = torch.randn(64, 16, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(1, device="cuda")
    calls = [
        ("y.add_(1) (one tiny launch through ATen)", lambda: y.add_(1), False),
        ("torch.empty 64x16 bf16", lambda: torch.empty(64, 16, device="cuda", dtype=torch.bfloat16), False),
        ("constant_pad_nd of a 512x13 weight to 16 columns", lambda: torch.constant_pad_nd(w, (0, 3)), False),
        ("narrow(1, 0, 13).contiguous() of 64x16", lambda: g16.narrow(1, 0, 13).contiguous(), False),
        ("threshold_backward 64x64", lambda: torch.ops.aten.threshold_backward(g, g, 0), False),
    ]
    for name in names:
        calls += row_calls(name)
    for label, fn, grad in calls:
        print(f"{label}: {host_us_per_call(fn, 300, grad):.1f} us", flush=True)


if __name__ == "__main__":
    main()
