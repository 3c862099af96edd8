"""hypatia-run on models that do not take one float [batch, features] tensor: images, token ids,
several inputs (--input specs and --inputs files), tuple/dict outputs, --dtype, --parallel, --json,
and the one-line errors given before anything runs. The models are made here and saved to tmp."""
import json
import re
import subprocess
import warnings
from typing import Dict, Tuple

import pytest
import torch
from torch import nn

from test_models_app import field, hypatia_run, node_counts, requires_run

pytestmark = requires_run

FAST = ["--iters", "2", "--warmup", "2", "--threads", "1"]


class ImageNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        h = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.fc2(torch.relu(self.fc1(h)))


class TokenNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 16)
        self.fc = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, ids):
        return self.out(torch.relu(self.fc(self.emb(ids)))).sum(1)


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(6, 4)

    def forward(self, src, tgt):
        return torch.relu(self.a(src)) + self.b(tgt)


class TupleDictOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        h = self.head(torch.relu(self.fc(x)))
        return h, {"sum": h.sum(1), "max": h.amax(1)}


class Spectrum(nn.Module):
    """rfft has no bfloat16 kernel: the model rejects --dtype bf16."""

    def forward(self, x):
        return torch.fft.rfft(x).abs()


def save(module: nn.Module, path, how: str = "script", example=None):
    torch.manual_seed(0)
    module = module.eval()
    if how == "trace":
        scripted = torch.jit.trace(module, example)
    else:
        scripted = torch.jit.script(module)
        if how == "freeze":
            scripted = torch.jit.freeze(scripted)
    scripted.save(str(path))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("run_inputs")
    torch.manual_seed(0)
    image, token, two, outs = ImageNet(), TokenNet(), TwoInputs(), TupleDictOutputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nn.Transformer's remarks on nested tensors and scripting
        transformer = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                     dim_feedforward=32, dropout=0.0)
        transformer_file = save(transformer, d / "transformer.pt")
    return {
        "image": save(image, d / "image.pt"),
        "image_frozen": save(image, d / "image_frozen.pt", "freeze"),
        "token": save(token, d / "token.pt"),
        "two": save(two, d / "two.pt", "trace", (torch.randn(2, 8), torch.randn(2, 6))),
        "outs": save(outs, d / "outs.pt"),
        "spectrum": save(Spectrum(), d / "spectrum.pt"),
        "transformer": transformer_file,
    }


def assert_small(stdout: str, tolerance: float = 1e-5) -> None:
    assert float(field(stdout, "rel error")) <= tolerance, stdout
    assert float(field(stdout, "max abs diff")) <= 1e-4, stdout


def test_image_model(models, device):
    """A conv model takes a 4-d input; scripted and frozen files agree on it."""
    out = hypatia_run(models["image"], "--input", "2x3x16x16", "--compare", models["image_frozen"], "--device", device,
                      *FAST).stdout
    assert field(out, "inputs") == "x=2x3x16x16:float32"
    assert_small(out, tolerance=1e-5 if device == "cpu" else 2e-3)  # cuDNN convolutions may take TF32
    fused = hypatia_run(models["image"], "--input", "2x3x16x16", "--fuse", "--device", device, *FAST).stdout
    assert node_counts(fused, "fused") == [0, 1]  # fc1 -> relu -> fc2
    assert_small(fused)


def test_token_model(models, device):
    out = hypatia_run(models["token"], "--input", "4x7:int64:0..1000", "--fuse", "--device", device, *FAST).stdout
    assert field(out, "inputs") == "ids=4x7:int64:0..1000"
    assert node_counts(out, "fused") == [0, 1]
    assert_small(out)
    # Ids past the table: the model's own error, in one line, before any timing.
    bad = hypatia_run(models["token"], "--input", "4x7:int64:1000..2000", *FAST, expect_ok=False)
    assert_one_line_error(bad, 1, "index out of range")


def test_two_inputs_specs_and_files(models, tmp_path):
    spec = hypatia_run(models["two"], "--input", "2x8", "--input", "2x6", "--fuse", *FAST).stdout
    assert field(spec, "inputs") == "src=2x8:float32 tgt=2x6:float32"
    assert node_counts(spec, "fused") == [1, 0]
    assert_small(spec)
    src, tgt = torch.randn(3, 8), torch.randn(3, 6)
    torch.save((src, tgt), tmp_path / "tuple.pt")
    torch.save({"tgt": tgt, "src": src}, tmp_path / "dict.pt")
    torch.save([src, tgt], tmp_path / "list.pt")
    for name in ("tuple.pt", "dict.pt", "list.pt"):
        out = hypatia_run(models["two"], "--inputs", tmp_path / name, "--fuse", *FAST).stdout
        assert field(out, "inputs") == "src=[3, 8] float32 tgt=[3, 6] float32", name
        assert_small(out)


def test_encoder_decoder(models):
    """nn.Transformer: two tensors given, the optional masks left to their defaults."""
    out = hypatia_run(models["transformer"], "--input", "5x2x16", "--input", "3x2x16", "--fuse", *FAST).stdout
    assert node_counts(out, "fused")[0] >= 1
    assert_small(out)


def test_tuple_and_dict_outputs_compared_per_leaf(models):
    out = hypatia_run(models["outs"], "--input", "3x8", "--fuse", *FAST).stdout
    leaves = re.findall(r"^output (\S+): \[([0-9, ]*)\] float32  max abs diff (\S+)  rel error (\S+)$", out, re.MULTILINE)
    assert [(name, shape) for name, shape, _, _ in leaves] == [("out[0]", "3, 4"), ('out[1]["sum"]', "3"),
                                                                ('out[1]["max"]', "3")], out
    assert all(float(rel) <= 1e-5 for _, _, _, rel in leaves), out
    assert float(field(out, "max abs diff")) == max(float(m) for _, _, m, _ in leaves)


def test_parallel_equals_serial(models, device):
    out = hypatia_run(models["outs"], "--input", "64x8", "--fuse", "--parallel", "3", "--device", device,
                      "--iters", "4", "--warmup", "1", "--threads", "1").stdout
    for label in ("original", "fused (hypatia::fuse)"):
        match = re.search(rf"^parallel {re.escape(label)}: threads 3  calls 12  wall (\S+) s  throughput (\S+) calls/s  "
                          r"p50 (\S+) ms  p99 (\S+) ms  max abs diff vs serial (\S+)$", out, re.MULTILINE)
        assert match, out
        wall, throughput, p50, p99, diff = map(float, match.groups())
        assert wall > 0 and throughput > 0 and 0 < p50 <= p99, out
        assert diff == 0 if device == "cpu" else diff <= 1e-5, out


def test_json(models):
    out = hypatia_run(models["outs"], "--input", "3x8", "--fuse", "--parallel", "2", "--json", *FAST).stdout
    result = json.loads(out)
    assert result["device"] == "cpu" and result["iters"] == 2 and result["dtype"] is None
    assert result["inputs"] == [{"name": "x", "value": "3x8:float32", "shape": [3, 8], "dtype": "float32"}]
    original, fused = result["runs"]
    assert original["label"] == "original" and fused["hypatia_nodes"] == {"fused_linear_relu": 0, "fused_mlp": 1}
    assert original["median_ms"] > 0 and fused["parallel"]["threads"] == 2 and fused["parallel"]["calls"] == 4
    assert fused["parallel"]["max_abs_diff_vs_serial"] == 0
    assert result["fusion_report"]["mlp"] == 1
    comparison = result["comparison"]
    assert [o["name"] for o in comparison["outputs"]] == ["out[0]", 'out[1]["sum"]', 'out[1]["max"]']
    assert comparison["max_abs_diff"] == max(o["max_abs_diff"] for o in comparison["outputs"]) <= 1e-4
    # Errors stay one line on stderr, with nothing on stdout.
    error = hypatia_run(models["token"], "--input", "4x7:int64", "--input", "4x7:int64", "--json", *FAST, expect_ok=False)
    assert_one_line_error(error, 2, "but 2 were given")


def test_dtype(models, device):
    out = hypatia_run(models["image_frozen"], "--input", "2x3x16x16", "--dtype", "bf16", "--fuse", "--device", device,
                      *FAST).stdout
    assert "dtype: bfloat16" in field(out, "device") and field(out, "inputs") == "x=2x3x16x16:bfloat16"
    assert node_counts(out, "fused") == [0, 1]  # the frozen constants were cast, and the fused op takes them
    assert_small(out, tolerance=1e-2)
    tokens = hypatia_run(models["token"], "--input", "4x7:int64:0..1000", "--dtype", "fp16", "--fuse", *FAST).stdout
    assert field(tokens, "inputs") == "ids=4x7:int64:0..1000"  # integer inputs keep their dtype
    assert_small(tokens, tolerance=2e-3)


def assert_one_line_error(out: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert out.returncode == code, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hypatia-run: error: ") and text in lines[0], out.stderr
    assert lines[0].isprintable(), out.stderr
    assert out.stdout == "", out.stdout  # before any timing output


def test_errors_before_anything_runs(models, tmp_path):
    def run(*args):
        return hypatia_run(*args, *FAST, expect_ok=False)

    two, image = models["two"], models["image"]
    assert_one_line_error(run(two, "--input", "2x8"), 2, "forward takes 2 inputs (src: Tensor, tgt: Tensor), but 1 was given")
    assert_one_line_error(run(image, "--input", "2x3x16x16", "--input", "2x3"), 2, "but 2 were given")
    assert_one_line_error(run(models["transformer"], "--input", "5x2x16"), 2, "forward takes 2 to 11 inputs")
    assert_one_line_error(run(image), 2, "cannot infer the input")
    assert_one_line_error(run(image, "--input", "2x3x16x"), 2, "bad shape '2x3x16x'")
    assert_one_line_error(run(image, "--input", "2x3:float32:1:2"), 2, "expected SHAPE[:DTYPE[:LOW..HIGH]]")
    assert_one_line_error(run(image, "--input", "-2x3"), 2, "bad shape")
    assert_one_line_error(run(image, "--input", "2x3:fp8"), 2, "unknown dtype 'fp8'")
    assert_one_line_error(run(image, "--input", "2x3x16x16", "--dtype", "int8"), 2, "--dtype expects")
    assert_one_line_error(run(image, "--input", "2x3x16x16", "--dtype", "bf8"), 2, "--dtype expects")
    assert_one_line_error(run(image, "--input", "2x3x16x16:float32:0..3"), 2,
                          "a LOW..HIGH range applies to integer dtypes only")
    assert_one_line_error(run(image, "--input", "2x3:bool:0..2"), 2, "integer dtypes only")
    assert_one_line_error(run(image, "--input", "2x3:int8:0..300"), 2, "range 0..300 does not fit int8")
    assert_one_line_error(run(image, "--input", "2x3:uint8:-1..3"), 2, "does not fit uint8")
    assert_one_line_error(run(image, "--input", "2x3:int64:5..5"), 2, "bad range '5..5'")
    assert_one_line_error(run(image, "--input", "2x3:int64:0..99999999999999999999"), 2, "bad range")
    assert_one_line_error(run(image, "--input", "2x3x16x16", "--batch", "4"), 2, "--batch and --features")
    torch.save((torch.randn(2, 8),), tmp_path / "one.pt")
    assert_one_line_error(run(two, "--inputs", tmp_path / "one.pt", "--input", "2x6"), 2, "exclude each other")
    assert_one_line_error(run(two, "--inputs", tmp_path / "one.pt"), 2, "but 1 was given")
    torch.save({"src": torch.randn(2, 8), "query": torch.randn(2, 6)}, tmp_path / "names.pt")
    assert_one_line_error(run(two, "--inputs", tmp_path / "names.pt"), 2, "it has no argument 'query'")
    torch.save({"src": torch.randn(2, 8), "tgt": 3}, tmp_path / "types.pt")
    assert_one_line_error(run(two, "--inputs", tmp_path / "types.pt"), 2, "Expected a value of type 'Tensor'")
    torch.save(3, tmp_path / "number.pt")
    assert_one_line_error(run(two, "--inputs", tmp_path / "number.pt"), 2, "expected a tensor, a tuple or list")
    assert_one_line_error(run(two, "--inputs", tmp_path / "missing.pt"), 1, "not found")
    # A model that rejects the dtype, and one that rejects the inputs.
    assert_one_line_error(run(models["spectrum"], "--input", "3x8", "--dtype", "bf16"), 1,
                          "spectrum.pt: forward failed with --dtype bfloat16: ")
    assert_one_line_error(run(image, "--input", "2x3x16x16:int64"), 1, "image.pt: forward failed: ")
