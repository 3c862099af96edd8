"""The TorchScript fusion from Python: hypatia_ops.fuse / fuse_file, the hypatia-fuse CLI and
enable_auto_fusion, checked against the unfused models in float64."""
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hypatia_ops
from conftest import rel_error

REPO = Path(__file__).resolve().parents[2]


class Block(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = nn.Linear(i, o)

    def forward(self, x):
        return F.relu(self.fc(x))


class Nested(nn.Module):
    """F.relu in a submodule, torch.relu and Tensor.relu: one 3-layer chain ending in a ReLU."""

    def __init__(self):
        super().__init__()
        self.a = Block(6, 16)
        self.b = nn.Linear(16, 12)
        self.c = nn.Linear(12, 4)

    def forward(self, x):
        h = torch.relu(self.b(self.a(x)))
        return self.c(h).relu()


class Residual(nn.Module):
    """The second ReLU's input is also added back: two pairs, no chain."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 8)
        self.l2 = nn.Linear(8, 8)

    def forward(self, x):
        h = F.relu(self.l1(x))
        return F.relu(self.l2(h)) + h


class OldStyle(nn.Module):
    """The addmm(b, x, t(w)) and matmul(x, t(w)) += b spellings of linear."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.addmm(self.l1.bias, x, self.l1.weight.t()).relu()
        out = h.matmul(self.l2.weight.t())
        out += self.l2.bias
        return torch.relu(out)


def sequential():
    return nn.Sequential(
        nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 16), nn.ReLU(inplace=True), nn.Linear(16, 4)
    )


# model, {op: count} after fuse() of the scripted model in training mode (dropout flag not constant)
CASES = {
    "sequential": (sequential, {"fused_linear_relu": 1, "fused_mlp": 1}),
    "nested": (Nested, {"fused_mlp": 1}),
    "residual": (Residual, {"fused_linear_relu": 2}),
    "inplace_relu": (lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(inplace=True)), {"fused_linear_relu": 1}),
}


def make(factory, device="cpu"):
    torch.manual_seed(0)
    return factory().double().to(device)


def count(module, op):
    return str(module.graph).count(f"hypatia::{op}(")


def assert_same_outputs_and_grads(fused, ref, x):
    out, expected = fused(x), ref(x)
    assert rel_error(out, expected) < 1e-12
    g = torch.randn_like(expected)
    params = list(ref.parameters())
    grads = torch.autograd.grad((fused(x) * g).sum(), list(fused.parameters()))
    expected_grads = torch.autograd.grad((ref(x) * g).sum(), params)
    for got, want in zip(grads, expected_grads):
        assert rel_error(got, want) < 1e-12


@pytest.mark.parametrize("name", CASES)
def test_fuse_scripted_trains_the_same_parameters(name, device):
    factory, ops = CASES[name]
    model = make(factory, device).eval()  # eval: dropout is the identity in both, outputs comparable
    scripted = torch.jit.script(model)
    fused, report = hypatia_ops.fuse(scripted, return_report=True)
    for op in ("fused_linear_relu", "fused_mlp"):
        assert count(fused, op) == ops.get(op, 0), str(fused.graph)
    assert report.linear_relu == ops.get("fused_linear_relu", 0)
    assert report.mlp == ops.get("fused_mlp", 0)
    assert "prim::CallMethod" not in str(fused.graph)
    assert "hypatia::" not in str(scripted.graph)  # the original is left alone
    assert all(p is q for p, q in zip(fused.parameters(), model.parameters()))
    x = torch.randn(5, 6, dtype=torch.float64, device=device)
    assert_same_outputs_and_grads(fused, model, x)


def test_fuse_no_mlp_fuses_pairs_only():
    model = make(Nested)
    fused = hypatia_ops.fuse(torch.jit.script(model), mlp=False)
    assert count(fused, "fused_linear_relu") == 3 and count(fused, "fused_mlp") == 0
    assert_same_outputs_and_grads(fused, model, torch.randn(5, 6, dtype=torch.float64))


def test_fuse_traced_old_style_linear():
    model = make(OldStyle)
    x = torch.randn(5, 6, dtype=torch.float64)
    traced = torch.jit.trace(model, x)
    assert "aten::addmm" in str(traced.inlined_graph)
    fused = hypatia_ops.fuse(traced)
    assert count(fused, "fused_mlp") == 1, str(fused.graph)
    assert "aten::addmm" not in str(fused.graph) and "aten::matmul" not in str(fused.graph)
    assert_same_outputs_and_grads(fused, model, x)


def test_fuse_traced_sequential():
    model = make(sequential).eval()
    x = torch.randn(5, 6, dtype=torch.float64)
    fused = hypatia_ops.fuse(torch.jit.trace(model, x))
    # Tracing in eval mode bakes train=False into dropout: one chain.
    assert count(fused, "fused_mlp") == 1, str(fused.graph)
    assert_same_outputs_and_grads(fused, model, x)


@pytest.mark.parametrize("name", ["sequential", "nested"])
def test_fuse_frozen(name, device):
    model = make(CASES[name][0], device).eval()
    fused, report = hypatia_ops.fuse(torch.jit.script(model), freeze=True, return_report=True)
    graph = str(fused.graph)
    assert count(fused, "fused_mlp") == 1 and report.mlp == 1, graph
    assert report.mlp_layers == 3
    assert "aten::dropout" not in graph and "prim::GetAttr" not in graph
    x = torch.randn(7, 6, dtype=torch.float64, device=device)
    with torch.no_grad():
        assert rel_error(fused(x), model(x)) < 1e-12


def test_fuse_already_frozen_keeps_eval_dropout_out_of_the_way():
    model = make(sequential).eval()
    frozen = torch.jit.freeze(torch.jit.script(model))
    fused = hypatia_ops.fuse(frozen)
    assert count(fused, "fused_mlp") == 1, str(fused.graph)
    x = torch.randn(7, 6, dtype=torch.float64)
    with torch.no_grad():
        assert rel_error(fused(x), model(x)) < 1e-12


def test_fuse_is_idempotent_and_reports_skips():
    fused, first = hypatia_ops.fuse(torch.jit.script(make(sequential)), return_report=True)
    again, second = hypatia_ops.fuse(fused, return_report=True)
    assert (second.linear_relu, second.mlp) == (0, 0)
    assert str(again.graph).count("hypatia::") == str(fused.graph).count("hypatia::")

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x):
            h = self.l(x)
            return torch.relu(h) + h

    _, report = hypatia_ops.fuse(torch.jit.script(make(Shared)), return_report=True)
    assert report.linear_relu == 0 and len(report.skipped) == 1 and "2 uses" in report.skipped[0]


def test_graph_writing_its_input_gets_pairs_that_freeze_folds():
    # torch.jit.freeze keeps a list's elements as attributes where the graph writes to its input
    # in place, so a chain of the module's weights there becomes pairs (fuzzer seed 1 program 13829).
    class WritesInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

        def forward(self, x):
            y = self.b(F.relu(self.a(x)))
            x.add_(1.0)
            return y

    fused, report = hypatia_ops.fuse(torch.jit.script(make(WritesInput).eval()), return_report=True)
    assert (count(fused, "fused_mlp"), count(fused, "fused_linear_relu")) == (0, 1)
    assert any("writes to its input in place" in why for why in report.skipped), report.skipped
    frozen = torch.jit.freeze(fused)
    assert "prim::GetAttr" not in str(frozen.graph)  # every weight folded into a constant
    x = torch.randn(3, 4, dtype=torch.float64)
    assert rel_error(frozen(x.clone()), make(WritesInput)(x.clone())) < 1e-12
    # Frozen first, the chain's weights are constants: fused_mlp.
    refrozen = hypatia_ops.fuse(torch.jit.freeze(torch.jit.script(make(WritesInput).eval())))
    assert count(refrozen, "fused_mlp") == 1


def test_fuse_rejects_eager_modules():
    with pytest.raises(TypeError, match="ScriptModule"):
        hypatia_ops.fuse(nn.Linear(2, 2))


def test_fuse_file(tmp_path):
    model = make(Nested)
    torch.jit.script(model).save(str(tmp_path / "in.pt"))
    report = hypatia_ops.fuse_file(tmp_path / "in.pt", tmp_path / "out.pt")
    assert report.mlp == 1
    loaded = torch.jit.load(str(tmp_path / "out.pt"))
    assert count(loaded, "fused_mlp") == 1
    assert_same_outputs_and_grads(loaded, model, torch.randn(5, 6, dtype=torch.float64))


# CLI --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli():
    build = Path(os.environ.get("HYPATIA_BUILD_DIR", REPO / "build"))
    path = build / "hypatia-fuse"
    if not path.is_file():
        pytest.fail(f"{path} not found: build with scripts/build.sh or set HYPATIA_BUILD_DIR")
    return path


def run_cli(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("freeze", [False, True])
def test_cli_round_trip(cli, tmp_path, freeze):
    model = make(sequential).eval()
    torch.jit.script(model).save(str(tmp_path / "in.pt"))
    flags = ["--freeze"] if freeze else []
    result = run_cli(cli, *flags, "--report", tmp_path / "report.json", tmp_path / "in.pt", tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    assert "fused_mlp" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mlp"] == 1 and report["linear_relu"] == (0 if freeze else 1)
    loaded = torch.jit.load(str(tmp_path / "out.pt"))
    assert "hypatia::fused_mlp" in str(loaded.graph)
    x = torch.randn(5, 6, dtype=torch.float64)
    if freeze:
        with torch.no_grad():
            assert rel_error(loaded(x), model(x)) < 1e-12
    else:
        loaded.eval()
        assert_same_outputs_and_grads(loaded, model, x)


def random_sequential(seed):
    """A Linear/ReLU/Dropout stack nobody tuned for: random depth, widths, biases, ReLU forms and
    dropout places (every ReLU follows a Linear, directly or through dropouts)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    width = rng.randint(1, 9)
    layers = []
    for _ in range(rng.randint(1, 5)):
        out = rng.randint(1, 9)
        layers.append(nn.Linear(width, out, bias=rng.random() < 0.8))
        width = out
        if rng.random() < 0.3:
            layers.append(nn.Dropout(0.3))
        if rng.random() < 0.75:
            layers.append(nn.ReLU(inplace=rng.random() < 0.5))
        if rng.random() < 0.2:
            layers.append(nn.Dropout(0.1))
    return nn.Sequential(*layers).double().eval(), layers[0].in_features


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("form", ["script", "trace"])
def test_cli_fuses_any_sequential(cli, tmp_path, seed, form):
    model, in_features = random_sequential(seed)
    x = torch.randn(7, in_features, dtype=torch.float64)
    src = tmp_path / "in.pt"
    (torch.jit.script(model) if form == "script" else torch.jit.trace(model, x)).save(str(src))
    relus = sum(isinstance(m, nn.ReLU) for m in model)
    for flags in ([], ["--freeze"]):
        dst = tmp_path / f"out{len(flags)}.pt"
        result = run_cli(cli, *flags, src, dst)
        assert result.returncode == 0, result.stderr
        fused = torch.jit.load(str(dst))
        with torch.no_grad():
            torch.testing.assert_close(fused(x), model(x), rtol=1e-12, atol=1e-12)
        if flags:  # frozen: eval dropout is gone, so every Linear -> ReLU must have been fused
            graph = str(fused.graph)
            assert "aten::relu" not in graph, graph
            assert ("hypatia::" in graph) == (relus > 0), graph


@pytest.mark.parametrize("kind", ["missing", "corrupt"])
def test_cli_bad_input(cli, tmp_path, kind):
    src = tmp_path / "in.pt"
    if kind == "corrupt":
        src.write_bytes(b"not a torchscript archive\n" * 10)
    out = tmp_path / "out.pt"
    result = run_cli(cli, src, out)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hypatia-fuse: error: cannot load"), result.stderr
    assert not out.exists() and not (tmp_path / "out.pt.partial").exists()


def test_cli_usage(cli):
    result = run_cli(cli, "only-one.pt")
    assert result.returncode == 2 and "usage:" in result.stderr


# Automatic fusion -------------------------------------------------------------------------------

AUTO_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch, torch.nn as nn
    sys.path.insert(0, sys.argv[1])
    import hypatia_ops
    from test_passes import Nested, make, rel_error
    hypatia_ops.enable_auto_fusion()
    hypatia_ops.enable_auto_fusion()  # idempotent
    model = make(Nested)
    scripted = torch.jit.script(model)
    x = torch.randn(5, 6, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(3):
            out = scripted(x)
        graph = str(torch.jit.last_executed_optimized_graph())
        assert graph.count("hypatia::fused_mlp(") == 1, graph
        assert "aten::linear" not in graph, graph
        assert rel_error(out, model(x)) < 1e-12
    # With gradients the fusion lands inside the autodiff subgraph; its backward is unchanged.
    g = torch.randn(5, 4, dtype=torch.float64)
    for _ in range(3):
        grads = torch.autograd.grad((scripted(x) * g).sum(), list(scripted.parameters()))
    assert "hypatia::" in str(scripted.graph_for(x))
    expected = torch.autograd.grad((model(x) * g).sum(), list(model.parameters()))
    assert all(rel_error(a, b) < 1e-12 for a, b in zip(grads, expected))
    assert "hypatia::" not in str(scripted.graph)  # the module's own code is not rewritten
    print("ok")
    """
)


def test_auto_fusion():
    # A process of its own: the hook is process-wide and cannot be removed.
    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), str(REPO / "python")]))
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", AUTO_SCRIPT, str(REPO / "python")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=here,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
