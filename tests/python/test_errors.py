"""Malformed calls raise RuntimeError naming the argument, the expectation and what was given."""
import pytest
import torch

from conftest import OTHER_GPU

flr = torch.ops.hypatia.fused_linear_relu
mlp = torch.ops.hypatia.fused_mlp


def t(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, device=device).to(dtype)


CASES = [
    (lambda: flr(t(2, 4), t(5, 3)), "fused_linear_relu: weight expects in_features 3 but input has last dimension 4"),
    (lambda: flr(t(2, 4), t(5)), "fused_linear_relu: weight must be 2-D [out_features, in_features], but got a 1-D"),
    (lambda: flr(t(2, 4), t(1, 5, 4)), "weight must be 2-D [out_features, in_features], but got a 3-D"),
    (lambda: flr(torch.tensor(1.0), t(5, 4)), "input must have at least 1 dimension"),
    (lambda: flr(t(2, 4), t(5, 4), t(4)), "bias must be 1-D of length out_features = 5, but got shape [4]"),
    (lambda: flr(t(2, 4), t(5, 4), t(1, 5)), "bias must be 1-D of length out_features = 5, but got shape [1, 5]"),
    (lambda: flr(t(2, 4), t(5, 4, dtype=torch.float64)), "weight must have the input's dtype Float, but got Double"),
    (lambda: flr(t(2, 4), t(5, 4), t(5, dtype=torch.half)), "bias must have the input's dtype Float, but got Half"),
    (
        lambda: flr(torch.ones(2, 4, dtype=torch.int64), torch.ones(5, 4, dtype=torch.int64)),
        "input must be float32, float64, bfloat16 or float16, but got Long",
    ),
    (lambda: mlp(t(2, 4), [t(5, 4), t(3, 4)], [None, None]), "fused_mlp: weights[1] expects in_features 4 but layer 0 produces 5"),
    (lambda: mlp(t(2, 4), [t(5, 3)], [None]), "fused_mlp: weights[0] expects in_features 3 but input has last dimension 4"),
    (lambda: mlp(t(2, 4), [t(5, 4), t(3, 5)], [None]), "biases must have one entry (a tensor or None) per layer, i.e. 2, but got 1"),
    (lambda: mlp(t(2, 4), [], []), "fused_mlp: weights must hold at least one layer, but got an empty list"),
    (lambda: mlp(t(2, 4), [t(5, 4), t(3, 5)], [None, t(5)]), "biases[1] must be 1-D of length out_features = 3, but got shape [5]"),
    (lambda: mlp(t(2, 4), [t(5, 4), t(3, 5, dtype=torch.double)], [None, None]), "weights[1] must have the input's dtype Float"),
]


@pytest.mark.parametrize("call,message", CASES, ids=[m[:40] for _, m in CASES])
def test_bad_input_raises_clear_error(call, message):
    with pytest.raises(RuntimeError) as info:
        call()
    assert message in str(info.value)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_errors_are_the_same_under_autograd(requires_grad):
    w = t(5, 3).requires_grad_(requires_grad)
    with pytest.raises(RuntimeError, match="weight expects in_features 3 but input has last dimension 4"):
        flr(t(2, 4), w)
    with pytest.raises(RuntimeError, match=r"weights\[1\] expects in_features 3 but layer 0 produces 5"):
        mlp(t(2, 4), [t(5, 4).requires_grad_(requires_grad), w], [None, None])


def test_errors_on_meta_tensors():
    with pytest.raises(RuntimeError, match="weight expects in_features 3 but input has last dimension 4"):
        flr(t(2, 4, device="meta"), t(5, 3, device="meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mixed_devices():
    current = f"cuda:{torch.cuda.current_device()}"
    with pytest.raises(RuntimeError, match=f"weight must be on the input's device {current}, but is on cpu"):
        flr(t(2, 4, device="cuda"), t(5, 4))
    with pytest.raises(RuntimeError, match="bias must be on the input's device"):
        flr(t(2, 4, device="cuda"), t(5, 4, device="cuda"), t(5))
    with pytest.raises(RuntimeError, match=r"weights\[1\] must be on the input's device"):
        mlp(t(2, 4, device="cuda"), [t(5, 4, device="cuda"), t(3, 5)], [None, None])
    if OTHER_GPU:
        with pytest.raises(RuntimeError, match=f"weight must be on the input's device {OTHER_GPU}, but is on {current}"):
            flr(t(2, 4, device=OTHER_GPU), t(5, 4, device=current))
        with pytest.raises(RuntimeError, match=rf"weights\[0\] must be on the input's device {current}, but is on {OTHER_GPU}"):
            mlp(t(2, 4, device=current), [t(5, 4, device=OTHER_GPU)], [None])


def test_private_ops_run_on_inputs_that_require_grad_and_refuse_backward(device):
    """The ops behind the autograd kernels compute from inputs that require grad (their ATen calls
    record no graph), and a backward through them raises instead of giving wrong gradients."""
    x = t(300, 64, device=device)
    w = t(64, 64, device=device).requires_grad_()
    b = t(64, device=device).requires_grad_()
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, b)
    assert torch.allclose(out, flr(x, w.detach(), b.detach()), rtol=1e-3, atol=1e-3) and not mask.requires_grad
    outputs = torch.ops.hypatia._fused_mlp_forward(x, [w, w], [b, None], False)
    assert torch.allclose(outputs[-1], mlp(x, [w.detach()] * 2, [b.detach(), None], False), rtol=1e-3, atol=1e-3)
    grads = torch.ops.hypatia._fused_mlp_backward(
        torch.ones_like(outputs[-1]), x, [w, w], outputs[:1], [True, False], False, True, True)
    assert len(grads) == 4
    for result, name in [(out, "_fused_linear_relu_masked"), (outputs[-1], "_fused_mlp_forward")]:
        with pytest.raises(RuntimeError, match=f"derivative for hypatia::{name} is not implemented"):
            result.sum().backward()
