"""torch.library.opcheck for both ops, and tracing by torch.compile and torch.export."""
import pytest
import torch
import torch.nn.functional as F

from conftest import rel_error


def linear_relu_samples(device):
    make = lambda *s, g=False: torch.randn(*s, device=device, requires_grad=g)  # noqa: E731
    return [
        (make(4, 8), make(5, 8), make(5)),
        (make(2, 3, 8, g=True), make(5, 8, g=True), make(5, g=True)),
        (make(6, g=True), make(3, 6, g=True), None),
        (make(0, 8), make(5, 8), make(5)),
    ]


def mlp_samples(device):
    make = lambda *s, g=False: torch.randn(*s, device=device, requires_grad=g)  # noqa: E731
    return [
        (make(4, 8), [make(16, 8), make(3, 16)], [make(16), None], False),
        (make(2, 3, 8, g=True), [make(16, 8, g=True), make(4, 16, g=True)], [make(16, g=True), make(4, g=True)], True),
        (make(5, 8, g=True), [make(6, 8, g=True)], [None], False),
    ]


def test_opcheck_fused_linear_relu(device):
    for args in linear_relu_samples(device):
        torch.library.opcheck(torch.ops.hypatia.fused_linear_relu.default, args)


def test_opcheck_fused_mlp(device):
    for args in mlp_samples(device):
        torch.library.opcheck(torch.ops.hypatia.fused_mlp.default, args)


def test_opcheck_fused_mlp_backward(device):
    # The op behind fused_mlp's backward, on what the training forward saved.
    torch.manual_seed(0)
    for x, ws, bs, relu_last in mlp_samples(device):
        x, ws = x.detach(), [w.detach() for w in ws]
        bs = [None if b is None else b.detach() for b in bs]
        outputs = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, relu_last)
        saved = outputs if relu_last else outputs[:-1]
        gout = torch.randn_like(outputs[-1])
        for input_grad, params_grad in [(True, True), (True, False), (False, True)]:
            args = (gout, x, ws, saved, [b is not None for b in bs], relu_last, input_grad, params_grad)
            torch.library.opcheck(torch.ops.hypatia._fused_mlp_backward.default, args)


def test_fused_mlp_backward_rejects_mismatched_saved_outputs(device):
    x, w = torch.randn(4, 8, device=device), torch.randn(16, 8, device=device)
    with pytest.raises(RuntimeError, match=r"saved_outputs must hold the outputs of the 1 layers that a ReLU follows, but got 0"):
        torch.ops.hypatia._fused_mlp_backward(torch.randn(4, 16, device=device), x, [w], [], [False], True, True, True)
    with pytest.raises(RuntimeError, match=r"saved_outputs\[0\] must have shape \[4, 16\], but got \[4, 15\]"):
        torch.ops.hypatia._fused_mlp_backward(
            torch.randn(4, 16, device=device), x, [w], [torch.randn(4, 15, device=device)], [False], True, True, True)


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.ops.hypatia.fused_linear_relu(x, self.fc1.weight, self.fc1.bias)
        return torch.ops.hypatia.fused_mlp(h, [self.fc2.weight, self.fc3.weight], [self.fc2.bias, self.fc3.bias], False)

    def reference(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def test_torch_compile_fullgraph(device):
    torch.manual_seed(0)
    net = TinyNet().to(device)
    x = torch.randn(16, 8, device=device)
    compiled = torch.compile(net, fullgraph=True)
    assert rel_error(compiled(x), net.reference(x)) < 1e-5
    compiled(x).sum().backward()  # the backward traces too
    assert net.fc1.weight.grad is not None


def test_torch_export(device):
    torch.manual_seed(0)
    net = TinyNet().to(device)
    x = torch.randn(16, 8, device=device)
    batch = torch.export.Dim("batch")
    exported = torch.export.export(net, (x,), dynamic_shapes=({0: batch},))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {"hypatia.fused_linear_relu.default", "hypatia.fused_mlp.default"} <= targets
    x2 = torch.randn(7, 8, device=device)
    assert rel_error(exported.module()(x2), net.reference(x2)) < 1e-5


def test_training_forward_meta_shapes_and_mask_check():
    # What FakeTensor sees of the CUDA training forward: the output, and its ReLU mask at 1 bit per
    # element with rows padded to 128 bits; and the mask's check, on any device.
    x, w = torch.empty(2, 3, 4, device="meta"), torch.empty(130, 4, device="meta")
    out, mask = torch.ops.hypatia._fused_linear_relu_masked(x, w, None)
    assert out.shape == (2, 3, 130) and mask.shape == (6, 32) and mask.dtype == torch.uint8
    assert torch.ops.hypatia._relu_mask_backward(out, mask).shape == (2, 3, 130)
    with pytest.raises(RuntimeError, match=r"mask must be uint8 \[6, 32\] for grad of shape \[2, 3, 130\], but got Byte"):
        torch.ops.hypatia._relu_mask_backward(out, mask[:, :3])
