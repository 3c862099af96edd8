"""The cuBLASLt search's checks, run by test_cublaslt_search.py in a subprocess (the search mode is
read once per process) with HYPATIA_CUBLASLT_LOG=1 (one line per problem, naming the choice).
Usage: cublaslt_search_cases.py CHECK [DTYPE]."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)
from conftest import TOLERANCE, linear_operands, rel_error, run_case_from_argv  # noqa: E402

# (M, K, N): rows not a multiple of any tile, K and N ragged for 128-wide tiles.
SHAPES = [(300, 96, 136), (520, 264, 200)]


def forward(dtype):
    """fused_linear_relu and a one-layer fused_mlp without ReLU, with and without bias, against
    float64 on the same (rounded) operands; a NaN row stays NaN through the ReLU, as in eager."""
    for i, (m, k, n) in enumerate(SHAPES):
        x, w, b = linear_operands((m,), k, n, dtype, i)
        x[1, 3] = float("nan")
        for bias in (b, None):
            ref = F.linear(x.double(), w.double(), None if bias is None else bias.double())
            for got, want in ((torch.ops.hypatia.fused_linear_relu(x, w, bias), F.relu(ref)),
                              (torch.ops.hypatia.fused_mlp(x, [w], [bias], False), ref)):
                assert got.shape == want.shape and got.dtype == dtype, (got.shape, want.shape, got.dtype)
                assert torch.equal(got.isnan().cpu(), want.isnan().cpu()), (m, k, n, bias is None)
                finite = want.isfinite()
                err = rel_error(got[finite], want[finite])
                assert err < TOLERANCE[dtype], (m, k, n, bias is None, err)
        print(f"forward {dtype} {m}x{k}->{n}: ok", flush=True)


def gradients(dtype):
    """Training: fused_linear_relu (input gradient; weight gradient with BGRADB) and a 3-layer
    fused_mlp (hidden layers' input gradients through DRELU_BGRAD), against float64; the bar is
    the dtype's or twice eager's own error, whichever is larger (ReLU masks that flip under
    rounding move even eager's gradients away from float64)."""
    m, k, n = SHAPES[0]
    x, w, b = linear_operands((m,), k, n, dtype, 7)
    w2, w3 = (torch.randn(72, n, device="cuda") / n**0.5).to(dtype), (torch.randn(40, 72, device="cuda") / 72**0.5).to(dtype)
    b2, b3 = torch.randn(72, device="cuda").to(dtype), torch.randn(40, device="cuda").to(dtype)
    cases = [
        ("linear_relu", lambda t: torch.ops.hypatia.fused_linear_relu(t[0], t[1], t[2]),
         lambda t: F.relu(F.linear(t[0], t[1], t[2])), [x, w, b], n),
        ("mlp", lambda t: torch.ops.hypatia.fused_mlp(t[0], [t[1], t[2], t[3]], [t[4], t[5], t[6]], False),
         lambda t: F.linear(F.relu(F.linear(F.relu(F.linear(t[0], t[1], t[4])), t[2], t[5])), t[3], t[6]),
         [x, w, w2, w3, b, b2, b3], 40),
    ]
    for name, fused, eager, tensors, width in cases:
        g = torch.randn(m, width, dtype=torch.float64, device="cuda")

        def grads(fn, dt):
            leaves = [t.to(dt).detach().requires_grad_() for t in tensors]
            return torch.autograd.grad(fn(leaves), leaves, g.to(dt))

        exact, ours, theirs = grads(eager, torch.float64), grads(fused, dtype), grads(eager, dtype)
        errors = []
        for i, (got, want, base) in enumerate(zip(ours, exact, theirs)):
            err, bar = rel_error(got, want), max(TOLERANCE[dtype], 2 * rel_error(base, want))
            assert err <= bar, (name, f"gradient of operand {i}", err, bar)
            errors.append(f"{err:.1e}/{bar:.1e}")
        print(f"gradients {dtype} {name}: ok (error/bar by operand: {' '.join(errors)})", flush=True)


def by_length():
    """Unset, the search widens only where a call is long: a float32 2048x2048->2048 forward
    (17 GFLOP, ~0.3 ms on an H100) and not a 64x64->64 one. Both still match float64."""
    for m, k, n in ((2048, 2048, 2048), (64, 64, 64)):
        x, w, b = linear_operands((m,), k, n, torch.float32, 3)
        err = rel_error(torch.ops.hypatia.fused_linear_relu(x, w, b), F.relu(F.linear(x.double(), w.double(), b.double())))
        assert err < TOLERANCE[torch.float32], (m, k, n, err)
    print("by_length: ok", flush=True)


if __name__ == "__main__":
    run_case_from_argv(globals())
