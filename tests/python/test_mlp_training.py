"""fused_mlp's training path on every device: the training forward's saved outputs and the gradients
of _fused_mlp_backward (CUDA: the narrow kernels or the per-layer path; CPU: blocks of rows through
every layer, except wide float32/float64 layers, which take the per-layer path), against float64 with eager's rounding and
masks, and against eager autograd; the gradients asked for only; NaN; zero rows; opcheck."""
import pytest
import torch

from conftest import ONEDNN_FLOAT32_BLOCKS_CPU, TOLERANCE, cpu_threads, eager_mlp, make_mlp, rel_error


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


def mlp_grads(x, ws, bs, relu_last, gout):
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


def random(shape, dtype, device):
    return torch.randn(shape, dtype=torch.float64).to(dtype).to(device)


# 5000 rows: several blocks of rows and a short last one in the CPU kernel, split over two tasks
# when two threads run. The widths: narrow (both devices' narrow kernels; on CUDA, the backward
# kernel sums the weight gradients of [64, 64, 64] and [16, 16] itself, and a second kernel those
# of [64] * 9, [32, 128, 16] and [128] * 4), and 300 wide (CUDA and CPU float32/float64: the
# per-layer path; CPU half precision: blocks, at any width).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 33, 5000, 65536])
@pytest.mark.parametrize("widths", [[64, 64, 64], [64] * 9, [32, 128, 16], [128] * 4, [16, 16], [64, 300, 64]])
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("bias_pattern", ["all", "mixed"])
def test_training_matches_rounded_reference_and_eager(device, dtype, rows, widths, relu_last, bias_pattern):
    if device == "cpu" and rows == 65536:
        pytest.skip("on the CPU 5000 rows already span several blocks and tasks")
    if dtype == torch.float64 and (rows == 65536 or len(widths) > 3):
        pytest.skip("float64 runs no kernel of its own; the short MLPs cover it")
    torch.manual_seed(rows + 3 * len(widths))
    x = random((rows, widths[0]), dtype, device)
    ws, bs = make_mlp(widths, dtype, bias_pattern, device=device)
    gout = random((rows, widths[-1]), dtype, device)
    out, outputs, grads = mlp_grads(x, ws, bs, relu_last, gout)
    tol = TOLERANCE[dtype]
    # The training forward keeps every layer's output, each as eager computes it.
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = eager_mlp(h, [w], [b], i + 1 < len(ws) or relu_last)
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
        return torch.autograd.grad(eager_mlp(leaves[0], leaves[1:1 + len(ws)], biases, relu_last), leaves, gout.to(dt))

    exact, eager_grads = autograd_grads(torch.float64), autograd_grads(dtype)
    for i, (got, ref, theirs) in enumerate(zip(grads, exact, eager_grads)):
        assert rel_error(got, ref) <= max(tol, 2 * rel_error(theirs, ref)), i


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_threads_give_the_same_gradients(dtype):
    """The CPU kernel's tasks sum their weight gradients apart and add them up in a fixed order:
    one and two threads agree with each other and with the reference."""
    torch.manual_seed(13)
    x = random((5000, 64), dtype, "cpu")
    ws, bs = make_mlp([64, 64, 64, 32], dtype, device="cpu")
    gout = random((5000, 32), dtype, "cpu")
    results = []
    for n in (1, 2):
        with cpu_threads(n):
            results.append(mlp_grads(x, ws, bs, False, gout))
    (_, outputs, one), (_, _, two) = results
    gx, gws, gbs = reference_backward_rounded(gout, x, ws, [True] * 3, outputs, False)
    for a, b, ref in zip(one, two, [gx] + gws + gbs):
        assert rel_error(a, ref) < TOLERANCE[dtype] and rel_error(b, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("needs", ["input", "params", "weights_only"])
def test_training_computes_the_gradients_asked_for(device, dtype, needs):
    torch.manual_seed(8)
    x = random((3000, 64), dtype, device)
    ws, bs = make_mlp([64, 64, 32], dtype, device=device)
    gout = random((3000, 32), dtype, device)
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
            assert rel_error(t.grad, ref) < TOLERANCE[dtype]


# 64 wide: the narrow kernels (CUDA) or blocks (CPU); 300 wide: the per-layer path (CUDA: the DRELU
# epilogue, which must zero a NaN gradient where the ReLU passed nothing, as threshold_backward does).
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("width", [64, 300])
def test_training_nan_gradients_spread_as_in_eager(device, dtype, relu_last, width):
    torch.manual_seed(9)
    x = random((2000, 64), dtype, device)
    x[1500, 3] = float("nan")  # a NaN output: its ReLU passes the gradient, as eager's does
    ws, bs = make_mlp([64, width, width, 64], dtype, device=device)
    gout = random((2000, 64), dtype, device)
    gout[7, :] = float("nan")
    _, _, grads = mlp_grads(x, ws, bs, relu_last, gout)
    leaves = [t.detach().requires_grad_() for t in [x] + ws + bs]
    eager_grads = torch.autograd.grad(eager_mlp(leaves[0], leaves[1:4], leaves[4:], relu_last), leaves, gout)
    for got, ref in zip(grads, eager_grads):
        assert torch.equal(got.isnan(), ref.isnan())
    assert grads[0][7].isnan().any() and not grads[0][8:1500].isnan().any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_non_contiguous_input_and_grad(device, dtype):
    torch.manual_seed(14)
    x = random((64, 3000), dtype, device).t()  # [3000, 64], transposed
    ws, bs = make_mlp([64, 64, 32], dtype, device=device)
    gout = random((32, 3000), dtype, device).t()
    assert not x.is_contiguous() and not gout.is_contiguous()
    _, outputs, grads = mlp_grads(x, ws, bs, True, gout)
    gx, gws, gbs = reference_backward_rounded(gout, x, ws, [True, True], outputs, True)
    for got, ref in zip(grads, [gx] + gws + gbs):
        assert rel_error(got, ref) < TOLERANCE[dtype]


def test_training_zero_rows_and_batch_dims(device):
    ws, bs = make_mlp([64, 64, 32], torch.bfloat16, device=device)
    for shape in [(0, 64), (2, 0, 64), (3, 50, 64)]:
        torch.manual_seed(10)
        x = random(shape, torch.bfloat16, device)
        gout = random(shape[:-1] + (32,), torch.bfloat16, device)
        out, outputs, grads = mlp_grads(x, ws, bs, True, gout)
        assert out.shape == shape[:-1] + (32,) and grads[0].shape == shape
        gx, gws, gbs = reference_backward_rounded(gout, x, ws, [True, True], outputs, True)
        for got, ref in zip(grads, [gx] + gws + gbs):
            assert got.shape == ref.shape
            if ref.numel() and ref.abs().max() > 0:
                assert rel_error(got, ref) < TOLERANCE[torch.bfloat16]
            else:  # no rows: zero weight and bias gradients
                assert torch.count_nonzero(got) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_backward_op(device, dtype):
    torch.manual_seed(12)
    x = random((100, 64), dtype, device)
    ws, bs = make_mlp([64, 64, 32], dtype, "mixed", device=device)
    outputs = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, True)
    gout = random((100, 32), dtype, device)
    for input_grad, params_grad in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(
            torch.ops.hypatia._fused_mlp_backward.default,
            (gout, x, ws, outputs, [True, False], True, input_grad, params_grad))


@pytest.mark.parametrize("width, blocked", [(64, True), (300, False)])
def test_cpu_narrow_backward_runs_by_blocks(width, blocked):
    """Narrow layers go back block by block (no ATen ReLU backward over whole layers); layers
    wider than 256 take the per-layer path, whose input gradients run oneDNN on AMD CPUs with AVX-512
    (from 2^27 multiply-adds: here 8000 x 64 x 300)."""
    torch.manual_seed(15)
    x = random((8000, 64), torch.float32, "cpu")
    ws, bs = make_mlp([64, width, 64], torch.float32, device="cpu")
    outputs = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, False)
    gout = random((8000, 64), torch.float32, "cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ops.hypatia._fused_mlp_backward(gout, x, ws, outputs[:1], [True, True], False, True, True)
    names = {e.name for e in prof.events()}
    assert ("aten::threshold_backward" in names) != blocked, sorted(names)
    assert ("mkldnn::_linear_pointwise" in names) == (not blocked and ONEDNN_FLOAT32_BLOCKS_CPU), sorted(names)


def training_peak_mib(step, device):
    """MiB of tensors allocated above the level before step() at its peak: the caching allocator's
    count on CUDA, the memory profiler's timeline of tensor lifetimes on the CPU."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    from torch.profiler._memory_profiler import Action
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                                record_shapes=True, with_stack=True) as prof:
        step()
    live = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        live += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, live)
    return peak / 2**20


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_frees_each_saved_output_after_its_layer(device, dtype):
    """The backward frees a layer's saved output once that layer is done, as eager's does, so that a
    training step's peak memory is no more than eager's (a top-heavy MLP as DLRM's top one: the
    widest outputs are saved first and needed last). Under saved-tensor hooks, which get every saved
    output, they stay to the end of the backward: the difference is the freeing (H200, float32:
    eager 327, fused 228, under hooks 312 MiB; CPU: 34.5, 30.5, 44.5)."""
    if device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("the CPU's bfloat16 backward goes by blocks of rows through every layer, at any width")
    torch.manual_seed(16)
    rows = 16384 if device == "cuda" else 2048
    x = random((rows, 64), dtype, device)
    ws, bs = make_mlp([64, 1024, 1024, 512, 256, 1], dtype, device=device)
    leaves = [w.requires_grad_() for w in ws] + [b.requires_grad_() for b in bs]

    def eager():
        eager_mlp(x, ws, bs, False).sum().backward()

    def fused():
        torch.ops.hypatia.fused_mlp(x, ws, bs, False).sum().backward()

    def fused_under_hooks():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            fused()

    peaks = {}
    for step in (eager, fused, fused_under_hooks) * 2:  # the second round, warm (cuBLAS workspaces)
        peaks[step.__name__] = training_peak_mib(step, device)
        for leaf in leaves:
            leaf.grad = None
    assert peaks["fused"] <= peaks["eager"] and peaks["fused"] < peaks["fused_under_hooks"], peaks


@pytest.mark.parametrize("widths", [[16, 64, 16], [16, 300, 64, 8]])
def test_training_backward_twice_with_retain_graph(device, widths):
    """A kept graph keeps every saved output for the next backward; the last one frees them, and a
    backward after it raises as eager's does."""
    torch.manual_seed(17)
    x = random((300, 16), torch.float32, device).requires_grad_()
    ws, bs = make_mlp(widths, torch.float32, device=device)
    leaves = [x] + [w.requires_grad_() for w in ws] + [b.requires_grad_() for b in bs]
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, True)
    gout = random(out.shape, torch.float32, device)
    first = torch.autograd.grad(out, leaves, gout, retain_graph=True)
    last = torch.autograd.grad(out, leaves, gout)
    for a, b in zip(first, last):
        assert torch.equal(a, b)
    with pytest.raises(RuntimeError, match="a second time"):
        torch.autograd.grad(out, leaves, gout)


def test_training_under_compiled_autograd(device):
    """Compiled autograd runs fused_mlp's backward node with the saved outputs it traced."""
    torch.manual_seed(18)
    x = random((300, 16), torch.float32, device).requires_grad_()
    ws, bs = make_mlp([16, 300, 64, 8], torch.float32, device=device)
    leaves = [x] + [w.requires_grad_() for w in ws] + [b.requires_grad_() for b in bs]

    def step():
        torch.ops.hypatia.fused_mlp(x, ws, bs, False).square().sum().backward()
        grads = [leaf.grad for leaf in leaves]
        for leaf in leaves:
            leaf.grad = None
        return grads

    expected = step()
    torch._dynamo.reset()
    with torch._dynamo.compiled_autograd._enable(torch.compile(backend="eager")):
        got = step()
    for a, b in zip(got, expected):
        assert rel_error(a, b) < 1e-5
