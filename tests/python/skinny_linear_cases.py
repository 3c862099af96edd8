"""The skinny-linear kernel's checks, run by test_skinny_linear.py in a subprocess whose environment
has HYPATIA_SKINNY_LINEAR=1 (the kernel wherever it applies, untimed) and HYPATIA_CUBLASLT_LOG=1
(one line per problem, naming the choice). Usage: skinny_linear_cases.py CHECK [DTYPE]."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)
from conftest import TOLERANCE, linear_operands as data, rel_error, run_case_from_argv  # noqa: E402

# (leading dims of the input, K, N): M from 1 to 256 (the kernel's limit) in one or several
# 32-row blocks, the last one ragged; K shorter than one 128-byte slice, not a whole number of
# slices, and many slices; N from 1 to several CTAs, ragged.
SHAPES = [((1,), 64, 1), ((7,), 784, 33), ((16,), 256, 1000), ((17,), 520, 4096), ((32,), 4096, 512),
          ((32,), 8, 40), ((5,), 2056, 96), ((2, 16), 128, 72), ((33,), 264, 200), ((256,), 256, 512),
          ((3, 50), 784, 130)]


def forward(dtype):
    """Every shape, with and without bias, with the ReLU (fused_linear_relu) and without it (a
    one-layer fused_mlp), against float64 on the same (rounded) operands."""
    for i, (lead, k, n) in enumerate(SHAPES):
        x, w, b = data(lead, k, n, dtype, i)
        for bias in (b, None):
            ref = F.linear(x.double(), w.double(), None if bias is None else bias.double())
            out = torch.ops.hypatia.fused_linear_relu(x, w, bias)
            plain = torch.ops.hypatia.fused_mlp(x, [w], [bias], False)
            for got, want in ((out, F.relu(ref)), (plain, ref)):
                assert got.shape == want.shape and got.dtype == dtype, (got.shape, want.shape, got.dtype)
                err = rel_error(got, want)
                assert err < TOLERANCE[dtype], (lead, k, n, bias is None, err)
            print(f"forward {dtype} {lead} K={k} N={n} bias={bias is not None}: ok", flush=True)


def nonfinite(dtype):
    """NaN and Inf flow as in eager: a NaN row stays NaN through the ReLU, an Inf times weights of
    both signs gives Inf, -Inf (0 after the ReLU) or NaN where eager does."""
    x, w, b = data((9,), 512, 300, dtype, 0)
    x[1, 3] = float("nan")
    x[4, 10] = float("inf")
    x[6, 0] = float("-inf")
    x[6, 1] = float("inf")
    for bias in (b, None):
        for relu in (True, False):
            ours = (torch.ops.hypatia.fused_linear_relu(x, w, bias) if relu
                    else torch.ops.hypatia.fused_mlp(x, [w], [bias], False))
            eager = F.linear(x, w, bias)
            eager = F.relu(eager) if relu else eager
            for mask in (torch.isnan, torch.isposinf, torch.isneginf):
                assert torch.equal(mask(ours), mask(eager)), (mask.__name__, relu, bias is None)
            finite = eager.isfinite()
            ref = F.linear(x.double(), w.double(), None if bias is None else bias.double())
            ref = F.relu(ref) if relu else ref
            assert rel_error(ours[finite], ref[finite]) < TOLERANCE[dtype], (relu, bias is None)
    assert ours[1].isnan().all()
    print(f"nonfinite {dtype}: ok", flush=True)


def gradients():
    """Training through the kernel's forward (float32; the backward's GEMMs are cuBLASLt's)."""
    x, w, b = data((2, 12), 96, 80, torch.float32, 1)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    exact = [t.double().detach().requires_grad_() for t in (x, w, b)]
    g = torch.randn(2, 12, 80, dtype=torch.float64, device="cuda")
    ours = torch.autograd.grad(torch.ops.hypatia.fused_linear_relu(*leaves), leaves, g.float())
    ref = torch.autograd.grad(F.relu(F.linear(*exact)), exact, g)
    for got, want in zip(ours, ref):
        assert rel_error(got, want) < 1e-5, rel_error(got, want)
    print("gradients: ok", flush=True)


def graph_and_profile():
    """The kernel is what runs (its name in the profile), and it replays in a CUDA graph."""
    x, w, b = data((24,), 1024, 640, torch.bfloat16, 2)
    torch.ops.hypatia.fused_linear_relu(x, w, b)  # chosen outside the capture
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.ops.hypatia.fused_linear_relu(x, w, b)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("skinny_linear_kernel" in name for name in names), names
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(out, F.relu(F.linear(x.double(), w.double(), b.double()))) < TOLERANCE[torch.bfloat16]
    print("graph_and_profile: ok", flush=True)


def uncovered():
    """Problems the kernel does not take run as before (257 rows, float64), and a float32 K of 6,
    whose rows are not a multiple of 16 bytes, padded with zero columns to a K of 8 that it takes."""
    for lead, k, n, dtype in (((257,), 64, 48, torch.float32), ((4,), 6, 24, torch.float32),
                              ((4,), 64, 24, torch.float64)):
        x, w, b = data(lead, k, n, dtype, 3)
        err = rel_error(torch.ops.hypatia.fused_linear_relu(x, w, b), F.relu(F.linear(x.double(), w.double(), b.double())))
        assert err < TOLERANCE[dtype], (lead, k, dtype, err)
    print("uncovered: ok", flush=True)


if __name__ == "__main__":
    run_case_from_argv(globals())
