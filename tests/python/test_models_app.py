"""The reference models (models/), their export script, and the C++ tools hypatia-run and
hypatia-fuse run on the exported files."""
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import List, Optional

import pytest
import torch
from torch import nn

from conftest import TOLERANCE, rel_error

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))
import export  # noqa: E402
from reference_models import MODELS, build, example_input  # noqa: E402

BUILD = Path(os.environ.get("HYPATIA_BUILD_DIR", ROOT / "build"))
RUN = BUILD / "hypatia-run"
FUSE = BUILD / "hypatia-fuse"
requires_run = pytest.mark.skipif(
    not RUN.is_file(), reason=f"{RUN} not built (it is built once passes/*.cpp implement hypatia::fuse)")
requires_fuse = pytest.mark.skipif(
    not (RUN.is_file() and FUSE.is_file()), reason=f"{FUSE} or {RUN} not built (they come with the passes)")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every variant of the small models (the 23 MB classifier has its own test)."""
    names = [name for name in MODELS if name != "mlp_classifier"]
    return export.export(tmp_path_factory.mktemp("models"), names, list(export.VARIANTS))


def load(path: Path) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.load(str(path))


def check_variants_match_eager(name: str, files) -> None:
    model = build(name)
    x = example_input(name, batch=5, seed=3)  # not the tracing input
    with torch.no_grad():
        expected = model(x)
        for variant in export.VARIANTS:
            torch.testing.assert_close(load(files[f"{name}_{variant}"])(x), expected, msg=f"{name} {variant}")


@pytest.mark.parametrize("name", ["transformer_ffn", "narrow_mlp", "vgg_head"])
def test_exported_variants_equal_eager(exported, name):
    check_variants_match_eager(name, exported)


def test_exported_mlp_classifier_equals_eager(tmp_path):
    check_variants_match_eager("mlp_classifier", export.export(tmp_path, ["mlp_classifier"], list(export.VARIANTS)))


def test_frozen_files_have_no_parameters_left(exported):
    frozen = load(exported["vgg_head_frozen"])
    assert list(frozen.parameters()) == []
    assert "aten::dropout" not in str(frozen.graph)  # eval-mode freezing drops Dropout


def test_weights_are_seeded():
    a, b, c = build("transformer_ffn", 0), build("transformer_ffn", 0), build("transformer_ffn", 1)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, pc), name
    assert not torch.equal(a.norm.weight, torch.ones_like(a.norm.weight))  # LayerNorm is randomised too


def test_export_cli(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "models" / "export.py"), "--out", str(tmp_path),
                          "--models", "narrow_mlp", "--variants", "traced", "frozen"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["narrow_mlp_frozen.pt", "narrow_mlp_traced.pt"]
    assert "63 features" in out.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "models" / "export.py"), "--out", str(tmp_path),
                          "--models", "resnet"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "resnet" in bad.stderr


# --- hypatia-run -------------------------------------------------------------------------------

def hypatia_run(*args, expect_ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(RUN), *map(str, args)], capture_output=True, text=True, timeout=300)
    if expect_ok:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def field(stdout: str, key: str) -> str:
    match = re.search(rf"^{re.escape(key)}: (.*)$", stdout, re.MULTILINE)
    assert match, f"no '{key}:' line in:\n{stdout}"
    return match.group(1)


def node_counts(stdout: str, label: str) -> List[int]:
    """[fused_linear_relu, fused_mlp] counted by hypatia-run in the model labelled `label`."""
    match = re.search(rf"^{re.escape(label)}.*fused_linear_relu=(\d+) fused_mlp=(\d+)$", stdout, re.MULTILINE)
    assert match, f"no node counts for '{label}' in:\n{stdout}"
    return [int(match.group(1)), int(match.group(2))]


def assert_tiny_difference(stdout: str) -> None:
    rel = float(field(stdout, "rel error"))
    max_abs = float(field(stdout, "max abs diff"))
    assert rel <= TOLERANCE[torch.float32], stdout
    assert max_abs <= 1e-4, stdout
    ratio = re.search(r"^speed ratio \(original/\w+\): ([0-9.]+)$", stdout, re.MULTILINE)
    assert ratio and float(ratio.group(1)) > 0, stdout


FAST = ["--batch", "8", "--iters", "2", "--warmup", "2", "--threads", "1"]


@requires_run
@pytest.mark.parametrize("variant", export.VARIANTS)
@pytest.mark.parametrize("name", ["narrow_mlp", "transformer_ffn", "vgg_head"])
def test_run_fuse_small_models(exported, name, variant, device):
    stdout = hypatia_run(exported[f"{name}_{variant}"], "--fuse", "--device", device, *FAST).stdout
    assert field(stdout, "device").startswith(device)
    assert re.search(rf"features: {MODELS[name].in_features}\b", stdout), stdout
    assert node_counts(stdout, "original") == [0, 0]
    report = re.search(r"^fusion report: linear_relu=(\d+) mlp=(\d+) mlp_layers=(\d+)", stdout, re.MULTILINE)
    assert report, stdout
    linear_relu, mlp, mlp_layers = map(int, report.groups())
    assert node_counts(stdout, "fused") == [linear_relu, mlp]  # the report matches the graph
    assert linear_relu + mlp >= 1, stdout  # every model has a Linear -> ReLU
    assert mlp_layers >= 2 * mlp
    assert_tiny_difference(stdout)


@requires_run
def test_run_fuse_freeze_no_mlp(exported):
    stdout = hypatia_run(exported["narrow_mlp_scripted"], "--fuse", "--freeze", "--no-mlp", *FAST).stdout
    assert "original (frozen)" in stdout
    assert node_counts(stdout, "fused")[1] == 0  # no fused_mlp without FuseOptions::mlp
    assert node_counts(stdout, "fused")[0] >= 1
    assert_tiny_difference(stdout)


class FusedMLPModule(nn.Module):
    """A model that calls hypatia::fused_mlp itself, with the weights of a narrow_mlp."""

    weights: List[torch.Tensor]
    biases: List[Optional[torch.Tensor]]  # the class annotation is what TorchScript reads

    def __init__(self, model: nn.Sequential):
        super().__init__()
        linears = [m for m in model if isinstance(m, nn.Linear)]
        self.weights = [m.weight.detach() for m in linears]
        self.biases = [m.bias.detach() for m in linears]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.hypatia.fused_mlp(x, self.weights, self.biases, False)


@requires_run
def test_run_loads_model_calling_hypatia_ops(exported, tmp_path, device):
    """The ops are registered in the app (linked --no-as-needed), the input width is inferred from
    a frozen fused_mlp, and --compare runs two files on the same input."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fused = torch.jit.freeze(torch.jit.script(FusedMLPModule(build("narrow_mlp")).eval()))
    fused.save(str(tmp_path / "fused.pt"))
    stdout = hypatia_run(exported["narrow_mlp_frozen"], "--compare", tmp_path / "fused.pt", "--device", device, *FAST).stdout
    assert "features: 63" in stdout
    assert node_counts(stdout, "compare") == [0, 1]
    assert_tiny_difference(stdout)


@requires_run
def test_run_without_comparison(exported):
    stdout = hypatia_run(exported["vgg_head_traced"], *FAST).stdout
    assert float(re.search(r"^original: median ([0-9.]+) ms", stdout, re.MULTILINE).group(1)) > 0
    assert "max abs diff" not in stdout


def assert_one_line_error(out: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert out.returncode == code, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hypatia-run: error:") and text in lines[0], out.stderr


@requires_run
def test_run_errors(exported, tmp_path):
    assert_one_line_error(hypatia_run(tmp_path / "missing.pt", expect_ok=False), 1, "not found")
    (tmp_path / "corrupt.pt").write_bytes(b"not a zip archive")
    assert_one_line_error(hypatia_run(tmp_path / "corrupt.pt", expect_ok=False), 1, "cannot load")
    model = exported["narrow_mlp_frozen"]
    assert_one_line_error(hypatia_run(model, "--batch", "0", expect_ok=False), 2, "--batch")
    assert_one_line_error(hypatia_run(model, "--device", "tpu", expect_ok=False), 2, "--device")
    assert_one_line_error(hypatia_run(model, "--frobnicate", expect_ok=False), 2, "--frobnicate")
    assert_one_line_error(hypatia_run(expect_ok=False), 2, "one model file")
    assert_one_line_error(hypatia_run(model, "--features", "10", *FAST, expect_ok=False), 1, "shapes")
    assert_one_line_error(hypatia_run(model, "--device", "cpu:0", expect_ok=False), 2, "--device")
    missing = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU, or cuda:0 without one
    assert_one_line_error(hypatia_run(model, "--device", missing, expect_ok=False), 1, "CUDA device")
    if not torch.cuda.is_available():
        assert_one_line_error(hypatia_run(model, "--device", "cuda", expect_ok=False), 1, "CUDA")


# --- hypatia-fuse, then hypatia-run on its output ---------------------------------------------

def hypatia_fuse(*args) -> subprocess.CompletedProcess:
    out = subprocess.run([str(FUSE), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


@requires_fuse
@pytest.mark.parametrize("variant", ["scripted", "frozen"])
def test_fuse_cli_then_run(exported, tmp_path, variant, device):
    source = exported[f"narrow_mlp_{variant}"]
    hypatia_fuse("--report", tmp_path / "report.json", source, tmp_path / "fused.pt")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mlp"] == 1 and report["mlp_layers"] == 9, report  # one chain of all 9 Linears

    stdout = hypatia_run(source, "--compare", tmp_path / "fused.pt", "--device", device, *FAST).stdout
    assert node_counts(stdout, "compare") == [report["linear_relu"], report["mlp"]]
    assert_tiny_difference(stdout)

    # The fused file against eager PyTorch in float64.
    x = example_input("narrow_mlp", batch=16, seed=5)
    with torch.no_grad():
        ref = build("narrow_mlp").double()(x.double())
        out = load(tmp_path / "fused.pt")(x)
    assert rel_error(out, ref) <= TOLERANCE[torch.float32]


@requires_fuse
def test_fuse_cli_freeze_no_mlp(exported, tmp_path):
    hypatia_fuse("--freeze", "--no-mlp", exported["vgg_head_scripted"], tmp_path / "fused.pt")
    fused = load(tmp_path / "fused.pt")
    assert list(fused.parameters()) == []  # frozen
    stdout = hypatia_run(exported["vgg_head_frozen"], "--compare", tmp_path / "fused.pt", *FAST).stdout
    assert node_counts(stdout, "compare") == [2, 0]  # both Linear -> ReLU(inplace) pairs, no chain
    assert_tiny_difference(stdout)
