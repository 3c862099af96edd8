"""Forward results of both ops against eager PyTorch in float64, on random data."""
import pytest
import torch
import torch.nn.functional as F

from conftest import (ONEDNN_FLOAT32_BLOCKS_CPU, TOLERANCE, bf16_kernel_runs, cpu_flags, float32_block_takes_onednn,
                      rel_error)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
SHAPES = [  # (input shape, out_features)
    ((17,), 9),
    ((8, 16), 32),
    ((3, 5, 24), 40),
    ((2, 3, 4, 7), 5),
    ((130, 256), 512),
]


def reference_linear_relu(x, w, b):
    return F.relu(F.linear(x.double(), w.double(), None if b is None else b.double()))


def reference_mlp(x, ws, bs, relu_last):
    h = x.double()
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w.double(), None if b is None else b.double())
        if i + 1 < len(ws) or relu_last:
            h = F.relu(h)
    return h


def layer(in_f, out_f, dtype, device, bias=True):
    w = (torch.randn(out_f, in_f, dtype=torch.float64) / in_f**0.5).to(dtype).to(device)
    b = torch.randn(out_f, dtype=torch.float64).to(dtype).to(device) if bias else None
    return w, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,out_f", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_linear_relu_matches_eager(device, dtype, shape, out_f, bias):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64).to(dtype).to(device)
    w, b = layer(shape[-1], out_f, dtype, device, bias)
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    ref = reference_linear_relu(x, w, b)
    assert out.shape == ref.shape and out.dtype == dtype and out.device == x.device
    assert rel_error(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("widths", [[16, 32], [20, 64, 64, 10], [7, 5, 9, 3, 8]])
def test_fused_mlp_matches_eager(device, dtype, relu_last, widths):
    torch.manual_seed(1)
    x = torch.randn(4, 6, widths[0], dtype=torch.float64).to(dtype).to(device)
    layers = [layer(i, o, dtype, device, bias=(n % 2 == 0)) for n, (i, o) in enumerate(zip(widths, widths[1:]))]
    ws, bs = [w for w, _ in layers], [b for _, b in layers]
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)
    ref = reference_mlp(x, ws, bs, relu_last)
    assert out.shape == ref.shape and out.dtype == dtype
    assert rel_error(out, ref) < TOLERANCE[dtype]


def test_fused_mlp_default_relu_last_is_false(device):
    x = torch.randn(8, 4, device=device)
    w, b = layer(4, 6, torch.float32, device)
    out = torch.ops.hypatia.fused_mlp(x, [w], [b])
    assert (out < 0).any(), "a single layer without relu_last must keep negative outputs"
    assert rel_error(out, F.linear(x.double(), w.double(), b.double())) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_taller_than_a_row_block(device, dtype):
    # The CPU kernels' row blocking: several 1024-row blocks over threads, a short last block,
    # and bfloat16 widened to float32 per block where the CPU has no native bf16 GEMM.
    torch.manual_seed(2)
    x = torch.randn(5000, 256, dtype=torch.float64).to(dtype).to(device)
    layers = [layer(256, 256, dtype, device) for _ in range(4)]
    ws, bs = [w for w, _ in layers], [b for _, b in layers]
    assert rel_error(torch.ops.hypatia.fused_mlp(x, ws, bs, True), reference_mlp(x, ws, bs, True)) < TOLERANCE[dtype]
    out = torch.ops.hypatia.fused_linear_relu(x, ws[0], bs[0])
    assert rel_error(out, reference_linear_relu(x, ws[0], bs[0])) < TOLERANCE[dtype]


def test_non_contiguous_inputs(device):
    torch.manual_seed(3)
    x = torch.randn(16, 12, 10, device=device).transpose(0, 1)[:, ::2]  # strided, not contiguous
    w = torch.randn(10, 15, device=device).t()  # [15, 10], column-major
    b = torch.randn(30, device=device)[::2]
    assert not x.is_contiguous() and not w.is_contiguous() and not b.is_contiguous()
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    assert rel_error(out, reference_linear_relu(x, w, b)) < 1e-5
    out = torch.ops.hypatia.fused_mlp(x, [w, w.t()], [b, None], False)
    assert rel_error(out, reference_mlp(x, [w, w.t()], [b, None], False)) < 1e-5


def test_empty_batch_and_zero_features(device):
    w, b = layer(8, 3, torch.float32, device)
    assert torch.ops.hypatia.fused_linear_relu(torch.randn(0, 8, device=device), w, b).shape == (0, 3)
    assert torch.ops.hypatia.fused_linear_relu(torch.randn(2, 0, 8, device=device), w, b).shape == (2, 0, 3)
    assert torch.ops.hypatia.fused_mlp(torch.randn(0, 8, device=device), [w], [b], True).shape == (0, 3)
    # out_features == 0, with few and with many in_features.
    for in_f in (8, 300):
        x, w0 = torch.randn(4, in_f, device=device), torch.randn(0, in_f, device=device)
        assert torch.ops.hypatia.fused_linear_relu(x, w0, torch.randn(0, device=device)).shape == (4, 0)
        out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w0, None)
        assert out.shape == (4, 0) and mask.shape == (4, 0)
    # in_features == 0: the output is relu(bias), as in eager; narrow and wide layers, with a bias or not.
    for out_f in (3, 300):
        x0, w0, b0 = torch.randn(4, 0, device=device), torch.randn(out_f, 0, device=device), torch.randn(out_f, device=device)
        for bias in (b0, None):
            torch.testing.assert_close(torch.ops.hypatia.fused_linear_relu(x0, w0, bias), F.relu(F.linear(x0, w0, bias)))
        w1 = torch.randn(2, out_f, device=device)
        torch.testing.assert_close(torch.ops.hypatia.fused_mlp(x0, [w0, w1], [None, b0[:2]], True),
                                   F.relu(F.linear(F.relu(F.linear(x0, w0)), w1, b0[:2])))


def test_nan_and_inf_propagate_as_in_eager(device):
    torch.manual_seed(4)
    x = torch.randn(6, 8, device=device)
    x[1, 2] = float("nan")
    x[3, 0] = float("inf")
    x[4, 5] = -float("inf")
    w, b = layer(8, 5, torch.float32, device)
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    ref = F.relu(F.linear(x, w, b))
    assert out[1].isnan().all()
    torch.testing.assert_close(out, ref, equal_nan=True)
    ws = [w, layer(5, 4, torch.float32, device)[0]]
    out = torch.ops.hypatia.fused_mlp(x, ws, [b, None], True)
    torch.testing.assert_close(out, F.relu(F.linear(F.relu(F.linear(x, w, b)), ws[1])), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mkn", [(33, 64, 300), (1, 64, 300), (1000, 784, 512), (4096, 64, 64)])
@pytest.mark.parametrize("mlp", [False, True])
def test_half_precision_rounds_once_as_eager(device, dtype, mkn, mlp):
    """x @ w.T + b is rounded to the storage dtype once, as eager's GEMM rounds it: on the H100 some
    cuBLASLt kernels rounded the product before adding the bias (15% of outputs off by an ulp, and
    3 of 9900 ReLU signs flipped at 33x64->300 bf16, which training then feels in every gradient)."""
    m, k, n = mkn
    torch.manual_seed(m + k + n)
    x = torch.randn(m, k, dtype=torch.float64).to(dtype).to(device)
    w, b = layer(k, n, dtype, device)
    out = torch.ops.hypatia.fused_mlp(x, [w], [b], True) if mlp else torch.ops.hypatia.fused_linear_relu(x, w, b)
    z = torch.addmm(b.double(), x.double(), w.double().t())
    # float32 accumulation moves z by far less than 1e-5 here: no sign may differ beyond that
    assert not (((out > 0) != (z > 0)) & (z.abs() > 1e-5)).any()
    assert (out == F.relu(z).to(dtype)).double().mean() > 0.99


@pytest.mark.parametrize("bias", [True, False])
def test_compute_bound_layer_keeps_eager_semantics(device, bias):
    # in_features >= 256 and >= 2^27 multiply-adds in float32: on CPU one oneDNN inner product over
    # all rows, then ReLU.
    torch.manual_seed(5)
    x = torch.randn(300, 3, 1000, device=device).transpose(0, 2)  # [1000, 3, 300], not contiguous
    x[1, 2, 7] = float("nan")
    x[3, 0, 0] = float("inf")
    x[5, 1, 9] = -float("inf")
    w, b = layer(300, 520, torch.float32, device, bias)
    w = w.t().contiguous().t()  # column-major
    assert not x.is_contiguous() and not w.is_contiguous()
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    ref = F.relu(F.linear(x, w, b))
    assert out.shape == (1000, 3, 520) and out.is_contiguous()
    assert torch.equal(out.isnan(), ref.isnan()) and out[1, 2].isnan().all()
    torch.testing.assert_close(out, ref, equal_nan=True)
    finite = torch.isfinite(ref).all(-1)
    assert rel_error(out[finite], reference_linear_relu(x, w, b)[finite]) < 1e-5


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
@pytest.mark.parametrize("mkn, compute_bound", [
    ((3000, 300, 520), True), ((256, 256, 512), False), ((4096, 64, 4096), False),
    ((64, 1024, 1024), False), ((16, 1024, 1024), False), ((63, 1024, 1024), False), ((8, 1024, 1024), False),
    ((1, 1024, 1024), False), ((1, 512, 300), False)])
def test_cpu_float32_layer_takes_onednn_where_it_is_faster(mkn, compute_bound):
    """One oneDNN inner product from 256 in_features and 2^27 multiply-adds; below, row blocks by
    oneDNN on AMD CPUs with AVX-512 (where MKL's sgemm runs AVX2 code) where the block has the rows
    for it to pay, by MKL elsewhere."""
    m, k, n = mkn
    x, (w, b) = torch.randn(m, k), layer(k, n, torch.float32, "cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    onednn = compute_bound or float32_block_takes_onednn(m, k, n)
    assert ("mkldnn::_linear_pointwise" in {e.name for e in prof.events()}) == onednn
    assert rel_error(out, reference_linear_relu(x, w, b)) < TOLERANCE[torch.float32]


@pytest.mark.skipif("avx2" not in cpu_flags() or "fma" not in cpu_flags(), reason="the narrow kernel needs AVX2 and FMA")
@pytest.mark.parametrize("rows, width", [(1, 256), (63, 256), (64, 256), (3, 64), (4, 64), (300, 256)])
def test_cpu_narrow_float32_layers_pack_their_weight_only_where_the_rows_pay(rows, width):
    """A narrow float32 layer runs the library's AVX2 kernel (its weight packed a call) from one row per
    1024 weight elements, and addmm below: few-row calls ran up to 2x slower with the packing."""
    torch.manual_seed(2)
    x = torch.randn(rows, width)
    params = [layer(width, width, torch.float32, "cpu") for _ in range(2)]
    ws, bs = [w for w, _ in params], [b for _, b in params]
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = torch.ops.hypatia.fused_mlp(x, ws, bs, True)
    assert ("aten::addmm" in {e.name for e in prof.events()}) == (rows * 1024 < width * width)
    ref = x.double()
    for w, b in params:
        ref = F.relu(F.linear(ref, w.double(), b.double()))
    assert rel_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_row_blocks_share_a_packed_onednn_weight(dtype):
    """Wide layers over several row blocks (a short last one) run oneDNN on a weight packed once a
    call: float32 on AMD CPUs with AVX-512, bfloat16 where oneDNN's GEMM is native (and the library's
    own kernel, packing its own weight, does not run). NaN and Inf rows
    in a later block come out where float64 has them. On CPUs with AMX, oneDNN's bfloat16 GEMMs
    (eager's too) can also make rows just before a NaN or Inf row NaN, each layer one more, depending
    on the thread count (docs/perf/experiments.md#onednn-for-row-blocks); only there are
    such rows let through, and no others."""
    torch.manual_seed(12)
    x = torch.randn(2500, 200, dtype=torch.float64).to(dtype)
    poisoned = [1500, 2400]
    x[poisoned[0], 3], x[poisoned[1], 7] = float("nan"), float("inf")
    widths = [200, 520, 300, 260]
    ws, bs = zip(*(layer(i, o, dtype, "cpu", bias=j != 1) for j, (i, o) in enumerate(zip(widths, widths[1:]))))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = torch.ops.hypatia.fused_mlp(x, list(ws), list(bs), True)
        single = torch.ops.hypatia.fused_linear_relu(x, ws[0], bs[0])
    native_bf16 = dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    own_bf16 = native_bf16 and bf16_kernel_runs(2500, 520, 200)
    packed = (native_bf16 and not own_bf16) or (dtype == torch.float32 and ONEDNN_FLOAT32_BLOCKS_CPU)
    assert ("mkldnn::_reorder_linear_weight" in {e.name for e in prof.events()}) == packed
    amx_bleed = native_bf16 and "amx_bf16" in cpu_flags()
    for got, ref, depth in [(out, reference_mlp(x, ws, bs, True), len(ws)), (single, reference_linear_relu(x, ws[0], bs[0]), 1)]:
        assert (got.isnan() | ~ref.isnan()).all() and torch.equal(got.isinf(), ref.isinf())
        extra = (got.isnan() & ~ref.isnan()).any(-1).nonzero().flatten().tolist()
        allowed = {p - d for p in poisoned for d in range(1, depth + 1)} if amx_bleed else set()
        assert set(extra) <= allowed, f"NaN in rows {extra}, where float64 has finite values"
        assert got[poisoned[0]].isnan().all()
        finite = torch.isfinite(ref).all(-1)
        finite[extra] = False
        assert finite.sum() >= 2498 - len(allowed) and rel_error(got[finite], ref[finite]) < TOLERANCE[dtype]


def test_output_is_new_memory(device):
    x = torch.randn(4, 4, device=device)
    w = torch.eye(4, device=device)
    out = torch.ops.hypatia.fused_linear_relu(x, w)
    assert out.data_ptr() != x.data_ptr() and out.is_contiguous()


NARROW_KERNEL_CPU = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.mark.parametrize("rows", [1, 5, 6, 7, 97])
@pytest.mark.parametrize("kn", [(1, 1), (3, 4), (17, 16), (63, 9), (40, 33), (64, 64), (200, 250), (256, 256)])
@pytest.mark.parametrize("bias", [True, False])
def test_cpu_narrow_float32_layers(rows, kn, bias):
    """The CPU's own kernel for layers up to 256 wide: tiles of 6 rows x 16 columns, with short
    strips of rows and panels of columns; x rows read in place at their own stride."""
    torch.manual_seed(rows)
    k, n = kn
    x = torch.randn(rows, k + 5)[:, 2:k + 2]  # a row stride that is not k
    w, b = layer(k, n, torch.float32, "cpu", bias)
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    assert out.shape == (rows, n) and out.is_contiguous()
    # Elementwise: a one-row ReLU output may be all zeros, where a relative norm is undefined.
    torch.testing.assert_close(out.double(), reference_linear_relu(x, w, b), rtol=1e-5, atol=1e-5)
    ws = [w, layer(n, k, torch.float32, "cpu")[0]]
    out = torch.ops.hypatia.fused_mlp(x, ws, [b, None], False)
    torch.testing.assert_close(out.double(), reference_mlp(x, ws, [b, None], False), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [6, 7, 97, 600])
@pytest.mark.parametrize("kn", [(1, 1), (3, 4), (17, 16), (63, 9), (40, 33), (64, 64), (200, 250), (256, 256),
                                (300, 257), (513, 70), (1001, 33), (97, 1030)])
@pytest.mark.parametrize("bias", [True, False])
def test_cpu_bfloat16_layers(rows, kn, bias):
    """bfloat16 layers: where the CPU has AVX-512 BF16 and the rows pay for packing the weight, the
    own kernel (tiles of 6 rows x 64 columns, k two at a time, odd k, short strips, ragged panels,
    row chunks that pass one tile's weight; the weight packed by 16x16 transposes, partial blocks
    of 16 pairs), x rows read in place; elsewhere the other paths. Against float64 on the same
    (rounded) operands: one rounding of the fp32 sum to bfloat16."""
    torch.manual_seed(rows)
    k, n = kn
    x = torch.randn(rows, k + 5).bfloat16()[:, 2:k + 2]  # a row stride that is not k
    w, b = layer(k, n, torch.bfloat16, "cpu", bias)
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    assert out.shape == (rows, n) and out.dtype == torch.bfloat16 and out.is_contiguous()
    torch.testing.assert_close(out.double(), reference_linear_relu(x, w, b), rtol=8e-3, atol=8e-3)
    ws = [w, layer(n, k, torch.bfloat16, "cpu")[0]]
    out = torch.ops.hypatia.fused_mlp(x, ws, [b, None], False)
    # The hidden layer is rounded to bfloat16 as in eager: compare with eager's own rounding.
    torch.testing.assert_close(out, F.linear(F.relu(F.linear(x, ws[0], b)), ws[1]), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("rows, k, n", [(13, 20, 9), (517, 300, 70)])
def test_cpu_bfloat16_layers_keep_nan_and_inf(rows, k, n):
    torch.manual_seed(5)
    x = torch.randn(rows, k).bfloat16()
    x[6, 3], x[rows - 1, 0], x[7, 1] = float("nan"), float("inf"), -float("inf")  # a full strip and the short one
    w, b = layer(k, n, torch.bfloat16, "cpu")
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    assert out[6].isnan().all()
    torch.testing.assert_close(out, F.relu(F.linear(x, w, b)), equal_nan=True)


def test_cpu_narrow_float32_layers_keep_nan_and_inf():
    torch.manual_seed(5)
    x = torch.randn(13, 20)
    x[6, 3], x[12, 0], x[7, 1] = float("nan"), float("inf"), -float("inf")  # a full strip and the short one
    w, b = layer(20, 9, torch.float32, "cpu")
    out = torch.ops.hypatia.fused_linear_relu(x, w, b)
    assert out[6].isnan().all()
    torch.testing.assert_close(out, F.relu(F.linear(x, w, b)), equal_nan=True)


@pytest.mark.skipif(not NARROW_KERNEL_CPU, reason="the narrow CPU kernel needs AVX2")
@pytest.mark.parametrize("mkn", [(4096, 64, 64), (100, 256, 256), (4096, 64, 257), (4096, 257, 64), (100, 600, 600),
                                 (600, 600, 600)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_layers_take_their_own_kernel(mkn, dtype):
    """float32 layers up to 256 wide run no GEMM library call (bias and ReLU in the kernel's
    registers); wider, MKL's or oneDNN's. bfloat16 ones where oneDNN's GEMM is native: the library's
    kernel where the CPU has it and the rows pay for packing the weight (any width), else oneDNN's
    GEMM; elsewhere computed in float32, as float32 layers are."""
    m, k, n = mkn
    own_kernel = NARROW_KERNEL_CPU and k <= 256 and n <= 256
    if dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        own_kernel = bf16_kernel_runs(m, n, k)
    x, (w, b) = torch.randn(m, k).to(dtype), layer(k, n, dtype, "cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = torch.ops.hypatia.fused_mlp(x, [w], [b], True)
    gemms = {e.name for e in prof.events()} & {"aten::addmm", "aten::mm", "mkldnn::_linear_pointwise"}
    assert (not gemms) == own_kernel, gemms
    assert rel_error(out, reference_linear_relu(x, w, b)) < TOLERANCE[dtype]
