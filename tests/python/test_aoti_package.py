"""hypatia-run on AOTInductor packages (.pt2): a program that calls the hypatia ops, exported and
compiled with torch._inductor.aoti_compile_and_package, loaded and run from C++ (the ops found
through the linked library), compared with the package of the plain nn.Module and with TorchScript.
Each package is compiled once per device for the module (30-60 s each on a small CPU)."""
import json
import re
import subprocess
import warnings
from typing import Dict, Tuple

import pytest
import torch
from torch import nn

from test_models_app import RUN, field, node_counts, requires_run

pytestmark = requires_run

BATCH = 8


def plain_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


class FusedMLP(nn.Module):
    """plain_mlp's layers in one hypatia::fused_mlp call, as a fused exported program has them."""

    def __init__(self, plain: nn.Sequential):
        super().__init__()
        linears = [m for m in plain if isinstance(m, nn.Linear)]
        self.weights = nn.ParameterList([nn.Parameter(m.weight.detach().clone()) for m in linears])
        self.biases = nn.ParameterList([nn.Parameter(m.bias.detach().clone()) for m in linears])

    def forward(self, x):
        return torch.ops.hypatia.fused_mlp(x, list(self.weights), list(self.biases), False)


class TwoInTwoOut(nn.Module):
    """Two inputs, a tuple of two outputs, one Linear -> ReLU pair: fused_linear_relu by hand."""

    def __init__(self, fused: bool):
        super().__init__()
        torch.manual_seed(1)
        self.a = nn.Linear(16, 8)
        self.b = nn.Linear(4, 8)
        self.fused = fused

    def forward(self, x, y) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.fused:
            h = torch.ops.hypatia.fused_linear_relu(x, self.a.weight, self.a.bias)
        else:
            h = torch.relu(self.a(x))
        out = h + self.b(y)
        return out, out.sum(-1)


def compile_package(module: nn.Module, args, path) -> str:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(module, args)
        return torch._inductor.aoti_compile_and_package(program, package_path=str(path))


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """packages(device) -> {name: path}: fused.pt2 and plain.pt2 (one [8, 16] input, one output),
    pair.pt2 (TwoInTwoOut, fused) and pair_script.pt (its unfused TorchScript), compiled for
    `device` on first use."""
    built: Dict[str, Dict[str, str]] = {}

    def get(device: str) -> Dict[str, str]:
        if device not in built:
            d = tmp_path_factory.mktemp(f"pt2_{device.replace(':', '')}")
            plain = plain_mlp().to(device)
            x = torch.randn(BATCH, 16, device=device)
            y = torch.randn(BATCH, 4, device=device)
            pair = TwoInTwoOut(fused=True).eval().to(device)
            unfused = TwoInTwoOut(fused=False).eval()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.jit.script(unfused).save(str(d / "pair_script.pt"))
            built[device] = {
                "fused": compile_package(FusedMLP(plain).eval(), (x,), d / "fused.pt2"),
                "plain": compile_package(plain, (x,), d / "plain.pt2"),
                "pair": compile_package(pair, (x, y), d / "pair.pt2"),
                "pair_script": str(d / "pair_script.pt"),
            }
        return built[device]

    return get


def hypatia_run(*args, expect_ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(RUN), *map(str, args)], capture_output=True, text=True, timeout=600)
    if expect_ok:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


FAST = ["--iters", "3", "--warmup", "1", "--threads", "1"]


def test_fused_package_against_plain_package(packages, device):
    """.pt2 against .pt2: the fused package calls hypatia::fused_mlp through the proxy executor."""
    files = packages(device)
    out = hypatia_run(files["fused"], "--compare", files["plain"], "--input", f"{BATCH}x16", "--device", device,
                      *FAST).stdout
    assert field(out, "inputs") == f"in0={BATCH}x16:float32"
    assert node_counts(out, "original") == [0, 1]
    assert node_counts(out, "compare") == [0, 0]
    assert float(field(out, "rel error")) <= 1e-5, out
    assert float(field(out, "max abs diff")) <= 1e-4, out


def test_package_against_torchscript_two_inputs_two_outputs(packages, device):
    """.pt against .pt2 on two inputs, outputs compared leaf by leaf."""
    files = packages(device)
    out = hypatia_run(files["pair_script"], "--compare", files["pair"], "--input", f"{BATCH}x16",
                      "--input", f"{BATCH}x4", "--device", device, *FAST).stdout
    assert field(out, "inputs") == f"x={BATCH}x16:float32 y={BATCH}x4:float32"
    assert node_counts(out, "compare") == [1, 0]
    leaves = re.findall(r"^output (\S+): \[([0-9, ]*)\] float32  max abs diff (\S+)  rel error (\S+)$", out, re.MULTILINE)
    assert [(name, shape) for name, shape, _, _ in leaves] == [("out[0]", f"{BATCH}, 8"), ("out[1]", f"{BATCH}")], out
    assert all(float(rel) <= 1e-5 for _, _, _, rel in leaves), out


def test_package_parallel_and_json(packages, device):
    files = packages(device)
    out = hypatia_run(files["fused"], "--input", f"{BATCH}x16", "--parallel", "3", "--json", "--device", device,
                      *FAST).stdout
    result = json.loads(out)
    (run,) = result["runs"]
    assert run["hypatia_nodes"] == {"fused_linear_relu": 0, "fused_mlp": 1}
    assert run["parallel"]["threads"] == 3 and run["parallel"]["calls"] == 9
    assert run["parallel"]["max_abs_diff_vs_serial"] == 0 if device == "cpu" else \
        run["parallel"]["max_abs_diff_vs_serial"] <= 1e-5


def test_package_errors(packages, device):
    files = packages(device)

    def error(*args, code: int, text: str) -> None:
        out = hypatia_run(*args, *FAST, expect_ok=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == code and len(lines) == 1 and text in lines[0], out.stderr
        assert out.stdout == ""

    fused = files["fused"]
    error(fused, "--device", device, code=2, text="cannot infer the input of")
    error(fused, "--input", "8x16", "--input", "8x4", "--device", device, code=2,
          text="the package takes 1 input tensor, but 2 were given")
    error(fused, "--input", "8x16", "--dtype", "bf16", "--device", device, code=2, text="dtypes are compiled in")
    error(fused, "--input", "8x16", "--fuse", "--device", device, code=2, text="--fuse and --freeze rewrite")
    error(fused, "--compare", files["pair"], "--input", "8x16", "--device", device, code=2,
          text="the package takes 2 input tensors, but 1 was given")
    other = "cpu" if device != "cpu" else ("cuda" if torch.cuda.is_available() else None)
    if other is not None:
        error(fused, "--input", "8x16", "--device", other, code=2, text=f"was compiled for {device.split(':')[0]}")
