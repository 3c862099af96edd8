"""CI's smoke budget of the differential fuzzer (tests/fuzz/fuzz_passes.py): a fixed seed, 300
programs in two worker processes (about 2 minutes on a 2-core machine), no mismatch, no crash."""
import os
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
