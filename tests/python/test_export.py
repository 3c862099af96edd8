"""hypatia_ops.fuse_exported on torch.export programs: what it fuses and refuses, the fused program
through .module() (outputs and gradients against eager), torch.export.save / load, export again,
and an AOTInductor package of it run with torch._inductor.aoti_load_package."""
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hypatia_ops
from conftest import rel_error, requires_cuda

FUSED_TARGETS = {"hypatia.fused_linear_relu.default", "hypatia.fused_mlp.default"}


def targets(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


class Spellings(nn.Module):
    """Linear+ReLU pairs in every spelling torch.export sees, then a 3-layer chain through eval dropout."""

    def __init__(self, bias=True):
        super().__init__()
        self.pairs = nn.ModuleList(nn.Linear(6, 6, bias=bias) for _ in range(4))
        self.chain = nn.Sequential(nn.Linear(6, 16, bias=bias), nn.ReLU(inplace=True), nn.Dropout(0.5),
                                   nn.Linear(16, 16, bias=bias), nn.ReLU(), nn.Linear(16, 4, bias=bias))

    def forward(self, x):
        a = F.relu(self.pairs[0](x))
        b = torch.relu_(self.pairs[1](x))
        c = self.pairs[2](x).relu()
        d = F.relu(self.pairs[3](x), inplace=True)
        return a + b + c + d, self.chain(x)


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("bias", [True, False])
def test_fuses_pairs_and_chains_every_rank(device, rank, bias):
    torch.manual_seed(rank)
    model = Spellings(bias).to(device).eval()
    x = torch.randn(*(2, 3, 5)[:rank - 1], 6, device=device)
    fused, report = hypatia_ops.fuse_exported(torch.export.export(model, (x,)), return_report=True)
    assert (report.linear_relu, report.mlp, report.mlp_layers, report.skipped) == (4, 1, 3, [])
    assert not {"aten.linear.default", "aten.relu.default", "aten.relu_.default"} & set(targets(fused))
    for out, ref in zip(fused.module()(x), model(x)):
        assert out.shape == ref.shape and rel_error(out, ref) < 1e-5


def test_module_trains_with_the_ops_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 6, requires_grad=True)
    fused = hypatia_ops.fuse_exported(torch.export.export(model, (x,))).module()
    grads = torch.autograd.grad(fused(x).sum(), [x] + list(fused.parameters()))
    ref = torch.autograd.grad(model(x).sum(), [x] + list(model.parameters()))
    for g, r in zip(grads, ref):
        assert rel_error(g, r) < 1e-6


class Refused(nn.Module):
    def __init__(self, case):
        super().__init__()
        self.case, self.fc, self.drop = case, nn.Linear(6, 6), nn.Dropout(0.5)

    def forward(self, x, y):
        h = self.fc(x)
        if self.case == "other_user":
            return F.relu(h) + h
        if self.case == "train_dropout":
            return F.relu(self.drop(h))
        if self.case == "written_between":
            y.add_(1)
            return F.relu(h)
        raise AssertionError(self.case)


@pytest.mark.parametrize("case, why", [
    ("other_user", "linear feeding aten.relu.default has 2 users"),
    ("train_dropout", "dropout before the ReLU is in training mode"),
    ("written_between", "aten.add_.Tensor -> add_ between the chain's nodes may write to its operands"),
])
def test_refusals(case, why):
    model = Refused(case).train(case == "train_dropout")
    args = (torch.randn(3, 6), torch.zeros(2))
    fused, report = hypatia_ops.fuse_exported(torch.export.export(model, args), return_report=True)
    assert report.linear_relu == 0 and report.mlp == 0
    assert report.skipped == [f"aten.linear.default -> linear: {why}"]
    assert not FUSED_TARGETS & set(targets(fused))


def test_broadcast_bias_is_refused():
    class Broadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(8, 6)), nn.Parameter(torch.randn(1))

        def forward(self, x):
            return torch.relu(torch.addmm(self.b, x, self.w.t()))

    model, x = Broadcast(), torch.randn(4, 6)
    fused, report = hypatia_ops.fuse_exported(torch.export.export(model, (x,)), return_report=True)
    assert report.skipped == ["aten.addmm.default -> addmm: bias has 1 elements for 8 output features"]
    assert rel_error(fused.module()(x), model(x)) < 1e-6


def test_decomposed_two_d_program_fuses_and_no_mlp_keeps_pairs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8, bias=False), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(5, 6)
    ep = torch.export.export(model, (x,)).run_decompositions()
    assert {"aten.addmm.default", "aten.mm.default"} <= set(targets(ep))
    fused, report = hypatia_ops.fuse_exported(ep, return_report=True)
    assert (report.mlp, report.mlp_layers, report.linear_relu) == (1, 3, 0)
    assert targets(fused) == ["hypatia.fused_mlp.default"]
    assert rel_error(fused.module()(x), model(x)) < 1e-6
    pairs, report = hypatia_ops.fuse_exported(ep, mlp=False, return_report=True)
    assert (report.mlp, report.linear_relu) == (0, 2)
    assert rel_error(pairs.module()(x), model(x)) < 1e-6


def test_leaves_the_original_alone_and_rejects_other_types():
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
    ep = torch.export.export(model, (torch.randn(2, 6),))
    before = targets(ep)
    hypatia_ops.fuse_exported(ep)
    assert targets(ep) == before == ["aten.linear.default", "aten.relu.default"]
    with pytest.raises(TypeError, match="fuse_exported: ep must be a torch.export.ExportedProgram, but got Sequential"):
        hypatia_ops.fuse_exported(model)


def dynamic_model_and_program(device, rows=5):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 4)).to(device).eval()
    x = torch.randn(rows, 6, device=device)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    return model, hypatia_ops.fuse_exported(ep)


def test_save_load_and_export_again(tmp_path):
    model, fused = dynamic_model_and_program("cpu")
    torch.export.save(fused, tmp_path / "fused.pt2")
    loaded = torch.export.load(tmp_path / "fused.pt2")
    assert targets(loaded) == ["hypatia.fused_mlp.default"]
    x = torch.randn(9, 6)  # another batch size: the dynamic dimension survived
    assert rel_error(loaded.module()(x), model(x)) < 1e-6
    again = torch.export.export(loaded.module(), (x,))
    assert targets(again) == ["hypatia.fused_mlp.default"]
    assert rel_error(again.module()(x), model(x)) < 1e-6


def aoti_package(device, directory):
    """A model, and the AOTInductor package of its fused program (dynamic batch)."""
    model, fused = dynamic_model_and_program(device)
    path = torch._inductor.aoti_compile_and_package(fused, package_path=str(directory / "fused.pt2"))
    with zipfile.ZipFile(path) as package:  # the op is called from the package's C++ wrapper
        wrappers = [package.read(n).decode() for n in package.namelist() if n.endswith(".wrapper.json")]
    assert any('"target": "hypatia::fused_mlp"' in w for w in wrappers)
    return model, path


def skip_where_python_cannot_load(path):
    """Skips on a machine whose packages crash a Python process that loads them; hypatia-run still
    loads them there (test_aoti_package.py)."""
    if hypatia_ops.export.package_links_libstdcxx_statically(path):
        pytest.skip("this machine's Inductor links libstdc++ into AOTInductor packages, which crash when a Python "
                    "process loads them (PyTorch, docs/compile.md)")


def check_runs_like_eager(model, path, device):
    skip_where_python_cannot_load(path)
    runner = torch._inductor.aoti_load_package(path)
    for rows in (1, 7, 33):
        x = torch.randn(rows, 6, device=device)
        assert rel_error(runner(x), model(x)) < 1e-5


@pytest.fixture(scope="module")
def cpu_package(tmp_path_factory):
    return aoti_package("cpu", tmp_path_factory.mktemp("aoti"))


def test_aot_inductor_package_cpu(cpu_package):
    check_runs_like_eager(*cpu_package, "cpu")


def test_aot_inductor_package_needs_the_library(cpu_package):
    skip_where_python_cannot_load(cpu_package[1])
    script = f"import torch; torch._inductor.aoti_load_package({str(cpu_package[1])!r})"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Could not find schema for hypatia::fused_mlp" in proc.stderr


@requires_cuda
def test_aot_inductor_package_cuda(tmp_path):
    check_runs_like_eager(*aoti_package("cuda", tmp_path), "cuda")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_package_links_libstdcxx_statically(tmp_path):
    """Told apart by the ELF DT_NEEDED entries of the package's shared objects."""
    (tmp_path / "m.cpp").write_text('#include <string>\nextern "C" int m(const char* s) { return std::string(s).size(); }\n')
    for linkage, flags in (("dynamic", []), ("static", ["-static-libstdc++"])):
        so = tmp_path / f"{linkage}.so"
        subprocess.run(["g++", "-shared", "-fPIC", *flags, str(tmp_path / "m.cpp"), "-o", str(so)], check=True)
        with zipfile.ZipFile(tmp_path / f"{linkage}.pt2", "w") as package:
            package.write(so, "model/data/aotinductor/model/wrapper.so")
            package.writestr("model/data/aotinductor/model/wrapper.json", "{}")
    assert not hypatia_ops.export.package_links_libstdcxx_statically(tmp_path / "dynamic.pt2")
    assert hypatia_ops.export.package_links_libstdcxx_statically(tmp_path / "static.pt2")
