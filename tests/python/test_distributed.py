"""Data-parallel training of a fused model (scripts/ddp_train.py under torchrun, two processes): gloo
on the CPU; NCCL on two GPUs where the machine has them. Parameters and losses must match one
process training on the whole batches."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

CASES = [("cpu", "float32", "script"), ("cpu", "bfloat16", "script"), ("cpu", "float32", "compile")] + [
    pytest.param("cuda", dtype, frontend,
                 marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"))
    for dtype in ("float32", "bfloat16") for frontend in ("script", "compile")]


def torchrun(*args, timeout=600):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(ROOT / "scripts" / "ddp_train.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


@pytest.mark.parametrize("where, dtype, frontend", CASES)
def test_ddp_training_matches_one_process(where, dtype, frontend):
    proc = torchrun("--device", where, "--dtype", dtype, "--frontend", frontend, "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (verdict,) = [line for line in proc.stdout.splitlines() if line.startswith("ddp check:")]
    assert verdict.endswith(": ok") and "world 2" in verdict, verdict


def test_ddp_bench_writes_throughput(tmp_path):
    out = tmp_path / "ddp.json"
    proc = torchrun("--device", "cpu", "--bench", "--steps", "2", "--widths", "32,64,10", "--batch", "64",
                    "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = json.loads(out.read_text())
    assert row["world"] == 2 and row["fused"]["samples_per_s"] > 0 and row["unfused"]["samples_per_s"] > 0
