"""The cuBLASLt search beyond the heuristic's picks (LtPlan::variants in ops/cuda/linear_act_cuda.cpp):
with HYPATIA_CUBLASLT_SEARCH=variants only the variants contend, so every problem runs on one,
checked against float64 (forward, NaN propagation, training through BGRADB and DRELU_BGRAD);
unset, only long problems widen the search. Subprocesses: the mode is read once per process.
Skipped without a GPU."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import autotuner_log, requires_cuda

pytestmark = requires_cuda
HERE = Path(__file__).resolve().parent


def run_cases(*args, search=None):
    return autotuner_log("cublaslt_search_cases.py", *args,
                         env={"HYPATIA_DISABLE_NARROW_MLP": "1", "HYPATIA_CUBLASLT_SEARCH": search})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("check", ["forward", "gradients"])
def test_variants_match_float64(check, dtype):
    lines = run_cases(check, dtype, search="variants")
    assert lines and all(re.search(r": \d+ variants; in steady state", line) for line in lines), lines
    # A problem runs on a variant unless every one failed the probes (then ATen's way, logged).
    for line in lines:
        assert re.search(r"; chosen: v\d+$", line) or ", rejected " in line, line
    assert any(re.search(r"; chosen: v\d+$", line) for line in lines), lines


def test_search_widens_only_on_long_problems():
    lines = run_cases("by_length")
    long, short = ([line for line in lines if f"{s} TN Float epilogue RELU_BIAS" in line]
                   for s in ("2048x2048x2048", "64x64x64"))
    assert len(long) == 1 and re.search(r"candidates .*, \d+ variants; in steady state", long[0]), lines
    assert len(short) == 1 and "variants" not in short[0], lines


def test_unknown_search_mode_is_an_error():
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import hypatia_ops\n"
            "hypatia_ops.fused_linear_relu(torch.randn(4, 8, device='cuda'), torch.randn(3, 8, device='cuda'))\n")
    env = dict(os.environ, HYPATIA_CUBLASLT_SEARCH="fastest")
    proc = subprocess.run([sys.executable, "-c", code, str(HERE.parents[1] / "python")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and 'HYPATIA_CUBLASLT_SEARCH must be unset, "heuristic", "wide" or "variants", got "fastest"' in proc.stderr, proc.stderr
