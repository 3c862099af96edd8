"""torch.compile(model, backend="hypatia"): which chains it fuses and refuses (the report and the
ops that run), outputs and gradients against eager, dynamic shapes, autocast, Inductor options and
Inductor's caches. Graphs left with nothing but fused ops, and graphs that will be differentiated,
run without Inductor (fast to compile); the tests that need Inductor share one compiled LayerNorm
block per device."""
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

import hypatia_ops
from hypatia_ops import compile_backend
from conftest import rel_error, requires_cuda

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def ops_run(fn):
    """Names of the dispatcher ops that fn() runs (the profiler's events), but those that a hypatia op
    runs inside itself (its kernels may call ATen's)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn()

    def inside_hypatia(event):
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith("hypatia::"):
                return True
            parent = parent.cpu_parent
        return False

    return {e.name for e in prof.events() if not inside_hypatia(e)}


def compiled(model, **kwargs):
    return torch.compile(model, backend="hypatia", **kwargs)


def rewrite_only(gm, example_inputs):
    """The backend's rewrite and report, without Inductor: for graphs that only the report is about
    and that would take Inductor long to compile here (dropout's random numbers)."""
    compile_backend.rewrite(gm)
    return gm.forward


@pytest.mark.parametrize("dynamo_first", [False, True])
def test_import_registers_the_backend_without_loading_dynamo(dynamo_first):
    """`import hypatia_ops` leaves torch._dynamo unloaded (a second of import time); the backend is
    registered when torch.compile loads it, or at once where it was loaded before."""
    script = textwrap.dedent(f"""
        import sys, torch
        if {dynamo_first}:
            import torch._dynamo
        import hypatia_ops
        assert ("torch._dynamo" in sys.modules) == {dynamo_first}
        fn = torch.compile(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()), backend="hypatia")
        fn(torch.randn(2, 3))
        print(hypatia_ops.last_compile_report().linear_relu)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.split() == ["1"], proc.stderr[-2000:]


RELUS = {
    "nn.ReLU": lambda: nn.ReLU(),
    "nn.ReLU(inplace)": lambda: nn.ReLU(inplace=True),
    "F.relu": lambda: F.relu,
    "F.relu(inplace)": lambda: lambda h: F.relu(h, inplace=True),
    "F.relu_": lambda: F.relu_,
    "torch.relu": lambda: torch.relu,
    "torch.relu_": lambda: torch.relu_,
    "Tensor.relu": lambda: lambda h: h.relu(),
    "Tensor.relu_": lambda: lambda h: h.relu_(),
}


class Pair(nn.Module):
    def __init__(self, relu, bias=True, k=6, n=8):
        super().__init__()
        self.fc, self.act = nn.Linear(k, n, bias=bias), relu

    def forward(self, x):
        return self.act(self.fc(x))


@pytest.mark.parametrize("relu", list(RELUS))
def test_every_relu_spelling_fuses(relu):
    torch.manual_seed(0)
    model = Pair(RELUS[relu]())
    x = torch.randn(5, 6)
    out = compiled(model, fullgraph=True)(x)
    report = hypatia_ops.last_compile_report()
    assert (report.linear_relu, report.mlp, report.skipped) == (1, 0, [])
    assert rel_error(out, F.relu(model.fc(x))) < 1e-6
    assert "hypatia::fused_linear_relu" in ops_run(lambda: compiled(model)(x))


def chain(bias, dropout=0.0, relu_last=False, widths=(6, 16, 12, 4)):
    layers = []
    for i, (k, n) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(k, n, bias=bias))
        if i + 2 < len(widths) or relu_last:
            layers.append(nn.ReLU())
            if dropout:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("bias", [True, False])
def test_chains_and_pairs_every_rank_with_and_without_bias(device, rank, bias):
    torch.manual_seed(rank)
    model = nn.ModuleDict({"mlp": chain(bias, relu_last=True), "pair": Pair(nn.ReLU(), bias)}).to(device)
    fn = lambda x: (model["mlp"](x), model["pair"](x))  # noqa: E731
    x = torch.randn(*(3, 2, 5)[:rank - 1], 6, device=device, requires_grad=True)
    out = compiled(fn, fullgraph=True)(x)
    report = hypatia_ops.last_compile_report()
    assert (report.mlp, report.mlp_layers, report.linear_relu, report.skipped) == (1, 3, 1, [])
    ref = fn(x)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and rel_error(o, r) < 1e-5
    grads = torch.autograd.grad(sum(o.sum() for o in out), [x] + list(model.parameters()))
    ref_grads = torch.autograd.grad(sum(r.sum() for r in ref), [x] + list(model.parameters()))
    for g, r in zip(grads, ref_grads):
        assert rel_error(g, r) < 1e-5


def test_chain_through_eval_dropout_and_train_dropout_splits_it():
    torch.manual_seed(0)
    model = chain(True, dropout=0.5, widths=(6, 16, 16, 4)).eval()
    x = torch.randn(7, 6)
    out = compiled(model)(x)
    report = hypatia_ops.last_compile_report()
    assert (report.mlp, report.mlp_layers, report.linear_relu, report.skipped) == (1, 3, 0, [])
    assert rel_error(out, model(x)) < 1e-6
    torch._dynamo.reset()
    model.train()  # each Linear+ReLU is a pair; train-mode dropout sits between them
    torch.compile(model, backend=rewrite_only)(x)
    report = hypatia_ops.last_compile_report()
    assert (report.mlp, report.linear_relu, report.skipped) == (0, 2, [])


class Refused(nn.Module):
    """One candidate per case that must be left alone."""

    def __init__(self, case):
        super().__init__()
        self.case = case
        self.fc = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, y):
        h = self.fc(x)
        if self.case == "other_user":
            return F.relu(h) + h
        if self.case == "inplace_relu_alias":
            F.relu(h, inplace=True)
            return h * 2
        if self.case == "train_dropout":
            return F.relu(self.drop(h))
        if self.case == "written_between":
            y.add_(1)
            return F.relu(h)
        if self.case == "grad_mode_between":
            with torch.no_grad():
                h = self.fc(x)
            return F.relu(h)
        if self.case == "autocast_between":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.fc(x)
            return F.relu(h)
        raise AssertionError(self.case)


REFUSALS = {
    "other_user": "h feeding relu has 2 users",
    "inplace_relu_alias": "h feeding relu has 2 users",
    "train_dropout": "dropout before the ReLU is in training mode",
    "written_between": "between the chain's nodes may write to its operands",
    "grad_mode_between": "_set_grad_enabled -> _set_grad_enabled_1 between the chain's nodes changes global state",
    "autocast_between": "_exit_autocast -> _exit_autocast between the chain's nodes changes global state",
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_are_left_alone_and_reported(case):
    torch.manual_seed(0)
    model = Refused(case).train(case == "train_dropout")
    x, y = torch.randn(4, 6), torch.zeros(3)
    ref_y = y.clone()
    torch.manual_seed(1)
    ref = model(x, ref_y)
    torch.manual_seed(1)
    out = torch.compile(model, backend=rewrite_only)(x, y)
    report = hypatia_ops.last_compile_report()
    assert report.linear_relu == 0 and report.mlp == 0
    assert len(report.skipped) == 1 and REFUSALS[case] in report.skipped[0], report.skipped
    assert report.skipped[0].startswith("linear -> h")
    if case != "train_dropout":
        assert rel_error(out, ref) < 1e-6 and torch.equal(y, ref_y)


def test_intermediate_with_another_user_splits_the_chain_into_pairs():
    class Tapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 8)

        def forward(self, x):
            h = F.relu(self.a(x))
            return F.relu(self.b(h)), h

    model = Tapped()
    x = torch.randn(3, 6)
    out = compiled(model)(x)
    report = hypatia_ops.last_compile_report()
    assert (report.mlp, report.linear_relu, report.skipped) == (0, 2, [])
    for o, r in zip(out, model(x)):
        assert rel_error(o, r) < 1e-6


def test_unsupported_dtype_is_refused():
    x, w, b = torch.randint(-3, 4, (3, 4)), torch.randint(-3, 4, (2, 4)), torch.ones(2, dtype=torch.long)
    fn = lambda x, w, b: F.relu(F.linear(x, w, b))  # noqa: E731
    torch.compile(fn, backend=rewrite_only)(x, w, b)
    report = hypatia_ops.last_compile_report()
    assert report.linear_relu == 0
    assert report.skipped == ["linear -> linear: the input is torch.int64, not one of float32, float64, bfloat16, float16"]


def test_graph_of_fused_ops_only_skips_inductor_unless_asked():
    """AOTAutograd and Inductor would add only host time to a graph of fused ops (docs/compile.md);
    with a mode or options they get it."""
    model, x = chain(True), torch.randn(3, 6, requires_grad=True)
    counters.clear()
    compiled(model)(x).sum().backward()
    assert counters["aot_autograd"]["total"] == 0
    assert "hypatia::_fused_mlp_backward" in ops_run(lambda: compiled(model)(x).sum().backward())
    torch._dynamo.reset()
    with torch.no_grad():
        compiled(model, options={"size_asserts": False})(x)
    assert counters["aot_autograd"]["total"] == 1


def test_dynamic_shapes_compile_once():
    torch.manual_seed(0)
    counters.clear()
    model = chain(True, relu_last=True)
    fn = compiled(model, dynamic=True, fullgraph=True)
    for rows in (3, 5, 17):
        x = torch.randn(rows, 2, 6)
        assert rel_error(fn(x), model(x)) < 1e-6
    assert len([r for r in hypatia_ops.compile_reports() if r.mlp]) >= 1
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast(device, dtype):
    torch.manual_seed(0)
    model = chain(True, widths=(6, 16, 4)).to(device)
    x = torch.randn(5, 6, device=device, requires_grad=True)
    with torch.autocast(device, dtype=dtype):
        out = compiled(model, fullgraph=True)(x)
        ref = model(x)
    report = hypatia_ops.last_compile_report()
    assert (report.mlp, report.mlp_layers) == (1, 2)
    assert out.dtype == ref.dtype == dtype
    assert rel_error(out, ref) < 1e-2
    grads = torch.autograd.grad(out.float().sum(), [x] + list(model.parameters()))
    ref_grads = torch.autograd.grad(ref.float().sum(), [x] + list(model.parameters()))
    for g, r in zip(grads, ref_grads):
        assert g.dtype == r.dtype and rel_error(g, r) < 2e-2


class NormBlock(nn.Module):
    """LayerNorm -> Linear -> ReLU -> Linear + residual: the fused op with work left for Inductor."""

    def __init__(self, d=8, hidden=32):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


@pytest.fixture(scope="module")
def inductor_block():
    """One NormBlock per device and its compiled form, Inductor's for training too (by default a
    differentiated graph runs as it is), shared by the tests below."""
    made = {}

    def get(device):
        if device not in made:
            torch.manual_seed(0)
            model = NormBlock().to(device)
            made[device] = (model, compiled(model, fullgraph=True, options={compile_backend.INDUCTOR_OPTION: True}))
        return made[device]

    return get


def test_differentiated_graph_runs_as_it_is_unless_asked():
    """Training: AOTAutograd's and Inductor's host time costs more than Inductor's fusions save
    (docs/compile.md), so the fused graph runs as it is, the ops' C++ autograd included; the
    backend's option sends it to Inductor, or keeps an inference graph from it."""
    torch.manual_seed(0)
    model, x = NormBlock(), torch.randn(6, 8, requires_grad=True)
    counters.clear()
    out = compiled(model, fullgraph=True)(x)
    params = [x] + list(model.parameters())
    for g, r in zip(torch.autograd.grad(out.sum(), params), torch.autograd.grad(model(x).sum(), params)):
        assert rel_error(g, r) < 1e-6
    assert counters["aot_autograd"]["total"] == 0
    assert hypatia_ops.last_compile_report().mlp == 1
    assert "hypatia::fused_mlp" in ops_run(lambda: compiled(model)(x))
    torch._dynamo.reset()
    with torch.no_grad():
        compiled(model, options={compile_backend.INDUCTOR_OPTION: False})(x)
    assert counters["aot_autograd"]["total"] == 0
    with pytest.raises(Exception, match='options\\["hypatia.inductor"\\] must be True or False'):
        compiled(model, options={compile_backend.INDUCTOR_OPTION: "yes"})(x)


def test_training_runs_the_ops_own_backward_through_inductor(device, inductor_block):
    model, fn = inductor_block(device)
    x = torch.randn(10, 8, device=device, requires_grad=True)
    params = [x] + list(model.parameters())
    out = fn(x)
    assert rel_error(out, model(x)) < 1e-5
    report = hypatia_ops.last_compile_report()
    assert (report.mlp, report.mlp_layers) == (1, 2)
    grads = torch.autograd.grad(out.sum(), params)
    ref = torch.autograd.grad(model(x).sum(), params)
    for g, r in zip(grads, ref):
        assert rel_error(g, r) < 1e-5
    names = ops_run(lambda: torch.autograd.grad(fn(x).sum(), params))
    # the ops' own forward and backward, no ReLU backward derived from a decomposition
    assert {"hypatia::_fused_mlp_forward", "hypatia::_fused_mlp_backward"} <= names
    assert not {"aten::threshold_backward", "aten::relu", "aten::linear", "aten::addmm"} & names


def test_inference_through_inductor(device, inductor_block):
    model, fn = inductor_block(device)
    x = torch.randn(9, 8, device=device)
    with torch.no_grad():
        assert rel_error(fn(x), model(x)) < 1e-5
        assert "hypatia::fused_mlp" in ops_run(lambda: fn(x))


def test_inductor_options_are_passed_through():
    model = NormBlock()
    with pytest.raises(Exception, match="Unexpected optimization option not_an_option"):
        compiled(model, options={"not_an_option": True})(torch.randn(2, 8))


def test_cache_key_follows_the_pass_and_library(monkeypatch, tmp_path):
    """A second compile of the same graph loads Inductor's cached artifact; once the backend's tag
    (a hash of the rewrite's code and the library) changes, it compiles again."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model, x = NormBlock(), torch.randn(4, 8)
    with torch._inductor.config.patch(fx_graph_cache=True, fx_graph_remote_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=True):
        def compile_once():
            torch._dynamo.reset()
            counters.clear()
            with torch.no_grad():
                compiled(model)(x)
            return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]

        assert compile_once() == (0, 1)
        assert compile_once()[0] == 1 or counters["aot_autograd"]["autograd_cache_hit"] == 1
        assert compile_backend.cache_tag() == compile_backend._cache_tag
        monkeypatch.setattr(compile_backend, "_cache_tag", "hypatia-changed-pass")
        assert compile_once() == (0, 1)


@requires_cuda
def test_cuda_graphs_mode():
    """mode="reduce-overhead" (CUDA graphs) goes to Inductor, which captures the ops' kernels."""
    torch.manual_seed(0)
    model = chain(True, relu_last=True).cuda()
    fn = compiled(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):  # warm-up, capture, replay
            x = torch.randn(8, 6, device="cuda")
            assert rel_error(fn(x), model(x)) < 1e-5
    assert hypatia_ops.last_compile_report().mlp == 1
