"""CI's smoke budget of the differential fuzzer (tests/fuzz/fuzz_passes.py): a fixed seed, 300
programs in two worker processes (under 2 minutes on a 2-core machine), no mismatch, no crash, and
every pipeline run and fusing something."""
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_fuzz_smoke():
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "fuzz" / "fuzz_passes.py"), "--count", "300", "--seed", "0",
         "--jobs", "2", "--quiet"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-2000:]
    assert lines[-1] == "fuzz: 300 programs, 0 mismatches, 0 crashes", proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0
    coverage = next(line for line in lines if line.startswith("coverage (variants passed): "))
    counts = {k: int(v) for k, v in re.findall(r"([\w=-]+) (\d+)", coverage.split(": ", 1)[1])}
    for key in ("frontend=script", "frontend=trace", "mode=train", "mode=eval", "freeze", "ofi", "save", "grad",
                "no-mlp", "fused-by-api", "fused-by-file", "fused-by-cli", "fused-by-auto"):
        assert counts.get(key, 0) > 0, (key, coverage)
