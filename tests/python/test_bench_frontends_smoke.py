"""scripts/bench_frontends.py end to end on the CPU with --quick (the competitors that compile
nothing slow): it runs, its correctness checks pass, and it writes the JSON, markdown and chart,
and --merge keeps an earlier run's other models."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_frontends.py"
COMPETITORS = "eager,hypatia,ops,ops_dynamo,jit_fused"


def run(out, *args):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--threads", "1", "--out", str(out),
                           "--competitors", COMPETITORS, *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "frontends.json").read_text())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("frontends")
    return out, run(out, "--models", "tiny_mlp,vgg_head")


def test_rows_competitors_and_ratios(results):
    out, data = results
    assert data["metadata"]["device"] == "cpu" and data["metadata"]["threads"] == 1
    assert [(r["model"], r["mode"]) for r in data["rows"]] == [
        (m, mode) for m in ("tiny_mlp", "vgg_head") for mode in ("fwd", "fwd+bwd")]
    for row in data["rows"]:
        assert row["status"] == "ok"
        assert set(row["ms"]) == set(COMPETITORS.split(","))
        assert row["fusion"] == {"linear_relu": 0, "mlp": 1, "mlp_layers": 4 if row["model"] == "tiny_mlp" else 3,
                                 "skipped": []}
        assert row["hypatia_vs_eager"] == pytest.approx(row["ms"]["eager"] / row["ms"]["hypatia"])
    assert (out / "frontends.md").read_text().startswith("# Hypatia front ends")
    assert (out / "frontends.png").stat().st_size > 0


def test_merge_keeps_the_other_models(results, tmp_path):
    out, data = results
    merged = run(tmp_path, "--models", "tiny_mlp", "--modes", "fwd", "--merge", str(out / "frontends.json"))
    assert [(r["model"], r["mode"]) for r in merged["rows"]] == [("vgg_head", "fwd"), ("vgg_head", "fwd+bwd"), ("tiny_mlp", "fwd")]
    assert merged["metadata"]["merged_from"]["models"] == ["vgg_head"]
