"""The one-kernel narrow MLP behind fused_mlp on CUDA (ops/cuda/narrow_mlp_kernel.cu): forward
results against float64 with eager's per-layer rounding and against eager itself, its edge cases,
the shapes that must fall back to the per-layer path, the HYPATIA_DISABLE_NARROW_MLP switch, and
which kernels run (one launch forward; backward, one, or two where some weight gradients do not
fit on chip). The training path's gradients are checked on every device in test_mlp_training.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import TOLERANCE, eager_mlp, make_mlp, rel_error, requires_cuda, training_peak_bytes

pytestmark = requires_cuda

KERNEL_NAME = "narrow_mlp_forward_kernel"
BACKWARD_KERNEL_NAME = "narrow_mlp_backward_kernel"
WGRAD_KERNEL_NAME = "narrow_mlp_wgrad_kernel"
NARROW_DISABLED = os.environ.get("HYPATIA_DISABLE_NARROW_MLP", "") not in ("", "0")


def reference_rounded(x, ws, bs, relu_last):
    """float64 math on the same inputs, rounding each layer's output to x's dtype as eager does."""
    h = x.double()
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w.double(), None if b is None else b.double())
        if i + 1 < len(ws) or relu_last:
            h = F.relu(h)
        h = h.to(x.dtype).double()
    return h


def run_python(script, **env):
    """Runs `script` in a fresh interpreter (the library reads its environment once per process),
    with the repository's python/ on its path and `env` over os.environ; asserts that it succeeded
    and returns its standard output."""
    full_env = dict(os.environ, **env)
    repo = Path(__file__).resolve().parents[2]
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo / "python"), full_env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


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
    assert rel_error(out, eager_mlp(x, ws, bs, relu_last)) < tol


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 7, 64, 1000, 65536])
@pytest.mark.parametrize("widths", [[64, 64, 64], [64] * 9, [128] * 3, [32, 128, 16], [16, 16]])
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("bias_pattern", ["all", "none", "mixed"])
def test_matches_rounded_reference_and_eager(dtype, rows, widths, relu_last, bias_pattern):
    torch.manual_seed(rows + len(widths))
    x = torch.randn(rows, widths[0], dtype=torch.float64).to(dtype).cuda()
    ws, bs = make_mlp(widths, dtype, bias_pattern, device="cuda")
    check_matches(torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last), x, ws, bs, relu_last)


def test_batched_input_keeps_its_batch_dims():
    torch.manual_seed(3)
    x = torch.randn(4, 250, 64, dtype=torch.float64).to(torch.bfloat16).cuda()
    ws, bs = make_mlp([64, 128, 32], torch.bfloat16, device="cuda")
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, False)
    assert out.shape == (4, 250, 32)
    check_matches(out, x, ws, bs, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("widths", [[64, 64, 64], [64] * 9, [128, 128, 128]])
def test_many_tiles_per_warp(dtype, widths):
    # Enough rows that each warp of the persistent grid takes several tiles (its one tile buffer
    # refilled after each tile's stores), with a ragged last tile; every layer's output checked, as
    # the training forward keeps them.
    torch.manual_seed(len(widths))
    rows = 24 * torch.cuda.get_device_properties(0).multi_processor_count * 256 + 5
    x = torch.randn(rows, widths[0], device="cuda").to(dtype)
    ws, bs = make_mlp(widths, dtype, "mixed", device="cuda")
    check_matches(torch.ops.hypatia.fused_mlp(x, ws, bs, True), x, ws, bs, True)
    outputs = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, False)
    for i, out in enumerate(outputs):
        relu_last = i + 1 < len(ws)
        check_matches(out, x, ws[: i + 1], bs[: i + 1], relu_last)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("relu_last", [False, True])
def test_nan_stays_in_its_row_and_passes_relu(dtype, relu_last):
    # relu(NaN) must be NaN: were it 0, row 3 would come out finite (bias terms only).
    torch.manual_seed(4)
    x = torch.randn(100, 64, dtype=torch.float64).to(dtype).cuda()
    x[3, 5] = float("nan")
    ws, bs = make_mlp([64, 64, 64], dtype, device="cuda")
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
    ws, bs = make_mlp([64, 64, 32], torch.bfloat16, device="cuda")
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
    ws, bs = make_mlp(widths, dtype, "mixed", device="cuda")
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
    ws, bs = make_mlp([64, 64, 64], dtype, device="cuda")
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
    run_python(script, HYPATIA_DISABLE_NARROW_MLP="1")
    result = torch.load(tmp_path / "result.pt")
    if result["names"] is not None:
        assert result["names"] and not any(KERNEL_NAME in n for n in result["names"]), result["names"]

    xc, wsc = x.cuda(), [w.cuda() for w in ws]
    bsc = [None if b is None else b.cuda() for b in bs]
    fused = torch.ops.hypatia.fused_mlp(xc, wsc, bsc, True)
    assert rel_error(result["out"], fused) < TOLERANCE[torch.bfloat16]
    check_matches(result["out"].cuda(), xc, wsc, bsc, True)


ALLOCATIONS_SCRIPT = """
import sys, torch, hypatia_ops
x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
ws = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
bs = [torch.randn(256, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
counts = []
for grad in (False, True):
    for w in ws:
        w.requires_grad_(grad)
    for _ in range(2):  # the autotuner's first calls allocate their probes
        torch.ops.hypatia.fused_mlp(x, ws, bs, False)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch.ops.hypatia.fused_mlp(x, ws, bs, False)
    counts.append(torch.cuda.memory_stats()["allocation.all.allocated"] - before)
print(counts)
"""


@pytest.mark.skipif(NARROW_DISABLED, reason="HYPATIA_DISABLE_NARROW_MLP is set")
def test_uncovered_shapes_allocate_nothing_for_the_narrow_kernel():
    # 256 wide is beyond the narrow kernel: trying it must cost no allocation, in inference and in
    # the training forward (which once allocated every layer's output for it, then threw them away).
    counts = {disabled: run_python(ALLOCATIONS_SCRIPT, HYPATIA_DISABLE_NARROW_MLP=disabled).strip()
              for disabled in ("0", "1")}
    assert counts["0"] == counts["1"], counts


@pytest.mark.skipif(NARROW_DISABLED, reason="HYPATIA_DISABLE_NARROW_MLP is set")
@pytest.mark.parametrize("widths, wgrad_kernel", [
    ([64] * 4, False),   # the three layers' weight-gradient sums fit in the backward kernel, two CTAs per SM
    ([64] * 9, True),    # none fits beside eight layers' weights: the second kernel computes them
    ([128] * 4, True),   # the 128-wide backward kernel runs one CTA per SM: the second kernel
])
def test_training_runs_the_narrow_kernels(widths, wgrad_kernel):
    torch.manual_seed(11)
    x = torch.randn(4096, widths[0], dtype=torch.float64).to(torch.bfloat16).cuda().requires_grad_()
    ws, bs = make_mlp(widths, torch.bfloat16, device="cuda")
    for p in ws + bs:
        p.requires_grad_()
    gout = torch.randn(4096, widths[-1], dtype=torch.float64).to(torch.bfloat16).cuda()
    names = cuda_kernel_names(lambda: torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, False), [x] + ws + bs, gout))
    if names is None:
        pytest.skip("torch.profiler recorded no CUDA activity (CUPTI unavailable?)")
    assert sum(KERNEL_NAME in n for n in names) == 1, names
    assert sum(BACKWARD_KERNEL_NAME in n for n in names) == 1, names
    assert sum(WGRAD_KERNEL_NAME in n for n in names) == int(wgrad_kernel), names
    # No ATen GEMM, ReLU-backward or sum kernels: the masks, GEMMs and sums are all in the kernels above.
    assert not any("at::native" in n and ("threshold" in n or "reduce_kernel" in n) for n in names), names
    assert not any(k in n.lower() for k in ("gemm", "cutlass", "nvjet") for n in names), names


@pytest.mark.skipif(NARROW_DISABLED, reason="HYPATIA_DISABLE_NARROW_MLP is set")
def test_training_peak_memory_near_eager():
    # 8 layers of 64 at 262144 rows: the masked gradients that the backward kernel hands to the
    # weight-gradient kernel (7 layers' worth a row) go in chunks of rows near one layer's output
    # (rounded up to whole grids of the backward kernel: on the H100, 1.8 outputs' worth), so the peak
    # stays within two such outputs of eager's (the whole batch's would add 7). Gradients over several
    # chunks, the last a short one, are checked in test_mlp_training.py (65536 rows).
    torch.manual_seed(12)
    rows, widths = 262144, [64] * 9
    x = torch.randn(rows, 64, device="cuda").to(torch.bfloat16).requires_grad_()
    ws, bs = make_mlp(widths, torch.bfloat16, device="cuda")
    for p in ws + bs:
        p.requires_grad_()
    gout = torch.randn(rows, 64, device="cuda").to(torch.bfloat16)

    eager = training_peak_bytes(lambda: eager_mlp(x, ws, bs, False), [x] + ws + bs, gout)
    ours = training_peak_bytes(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False), [x] + ws + bs, gout)
    layer_output = rows * 64 * x.element_size()
    assert ours <= eager + 2 * layer_output, (ours / 2**20, eager / 2**20)
