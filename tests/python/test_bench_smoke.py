"""scripts/bench_ops.py end to end on the CPU with --quick: it runs, its correctness checks pass,
and it writes the JSON and markdown results with every field the report relies on."""
import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_ops.py"

ROW_KEYS = {
    "op", "shape", "label", "dtype", "tf32", "mode", "device", "threads", "memory_only", "status",
    "ms", "relerr", "tolerance", "peak_mem_MiB", "skipped", "compile_s", "reps", "calls_per_rep", "input_sets",
    "flops", "bytes", "flop_floor_ms", "byte_floor_ms", "floor_ms", "bound", "pct_of_floor",
    "best_competitor", "hypatia_vs_best", "hypatia_vs_eager", "baseline_eager_ms", "eager_vs_baseline",
}
META_KEYS = {"date_utc", "device", "device_name", "cpu_model", "threads", "torch", "cuda", "ceilings", "chart"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)  # a guard against a hang only
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_writes_json_and_markdown(results):
    assert (results / "results.md").read_text().startswith("# Hypatia ops benchmark")
    data = json.loads((results / "results.json").read_text())
    assert META_KEYS <= data["metadata"].keys()
    assert data["metadata"]["device"] == "cpu" and data["metadata"]["threads"] == [1]
    ceilings = data["metadata"]["ceilings"]["1"]
    assert ceilings["copy_GBps"] > 0 and ceilings["gemm_GFLOPs"]["float32"] > 0


def test_rows_cover_ops_modes_and_competitors(results):
    rows = json.loads((results / "results.json").read_text())["rows"]
    for row in rows:
        assert ROW_KEYS <= row.keys(), ROW_KEYS - row.keys()
        assert row["status"] == "ok", row["status"]
    timed = [r for r in rows if not r["memory_only"]]
    assert {(r["op"], r["mode"], r["dtype"]) for r in timed} == {
        (op, mode, dtype) for op in ("linear_relu", "mlp") for mode in ("fwd", "fwd+bwd") for dtype in ("float32", "bfloat16")
    }
    for row in timed:
        expected = {"eager", "compile", "hypatia"} | ({"jit"} if row["mode"] == "fwd" else set())
        # a competitor may be skipped (with its reason), never silently missing
        assert expected == row["ms"].keys() | row["skipped"].keys(), row["skipped"]
        assert row["ms"]["hypatia"] > 0 and row["ms"]["eager"] > 0
        assert row["relerr"]["hypatia"] <= row["tolerance"]
        assert row["hypatia_vs_eager"] == pytest.approx(row["ms"]["eager"] / row["ms"]["hypatia"])
        assert 0 < row["flop_floor_ms"] <= row["floor_ms"] and row["byte_floor_ms"] <= row["floor_ms"]
        assert row["peak_mem_MiB"]["hypatia"] > 0
        assert set(row["calls_per_rep"].values()) == {1}  # the CPU times each call on its own


def test_named_mlp_row(results):
    """A named MLP (issue 39's rows): its own widths, ReLU after the last layer, flops from them."""
    rows = json.loads((results / "results.json").read_text())["rows"]
    named = [r for r in rows if r["label"] == "tiny-ragged"]
    assert {r["mode"] for r in named} == {"fwd", "fwd+bwd"}
    for row in named:
        assert row["shape"] == {"M": 300, "widths": [13, 48, 40, 1], "relu_last": True}
        fwd_flops = 2 * 300 * (13 * 48 + 48 * 40 + 40 * 1)
        assert row["flops"] == fwd_flops * (3 if row["mode"] == "fwd+bwd" else 1)
        assert row["relerr"]["hypatia"] <= row["tolerance"]


def test_memory_only_row(results):
    rows = json.loads((results / "results.json").read_text())["rows"]
    (row,) = [r for r in rows if r["memory_only"]]
    assert row["op"] == "mlp" and row["ms"] == {}
    assert row["peak_mem_MiB"]["eager"] > 0 and row["peak_mem_MiB"]["hypatia"] > 0


def test_no_hostname_in_results(results):
    text = (results / "results.json").read_text()
    assert f'"{socket.gethostname()}"' not in text


@pytest.fixture(scope="module")
def bench_ops():
    spec = importlib.util.spec_from_file_location("bench_ops", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_ops"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_bursts_call_each_index_once_and_report_ms_per_call(bench_ops):
    called = []
    times = bench_ops.timed_run(called.append, first=6, count=4, device="cpu", burst=3)
    assert called == list(range(6, 18)) and len(times) == 4 and all(t >= 0 for t in times)
    # CUDA bursts last about BURST_S, one call at least and MAX_BURST at most; the CPU's are 1 call
    assert bench_ops.burst_size(bench_ops.BURST_S / 10, "cuda") == 10
    assert bench_ops.burst_size(1.0, "cuda") == 1
    assert bench_ops.burst_size(1e-9, "cuda") == bench_ops.MAX_BURST
    assert bench_ops.burst_size(1e-9, "cpu") == 1


def test_long_calls_get_a_sample_in_every_round(bench_ops):
    """A competitor whose call is long enough for the minimum of samples still takes its turn in every
    round of a full run's budget."""
    order = []
    timed = {name: (lambda i, name=name: order.append(name), 1.0) for name in ("eager", "hypatia")}
    for device in ("cpu", "cuda"):
        order.clear()
        budget = bench_ops.timing_budget(device, quick=False)
        result = bench_ops.time_interleaved(timed, 1, "cpu", budget)  # 1 s a call, already warm
        assert order == ["eager", "hypatia"] * bench_ops.ROUNDS
        assert {name: reps for name, (_, reps, _) in result.items()} == {"eager": bench_ops.ROUNDS,
                                                                         "hypatia": bench_ops.ROUNDS}
