"""The skinny-linear CUDA kernel (ops/cuda/skinny_linear_kernel.cu: act(x @ w.T + b) for 1..256 rows),
forced onto every problem it covers (HYPATIA_SKINNY_LINEAR=1, read once per process, hence the
subprocesses) and checked against float64; the autotuner's log must name it for each covered
problem and for no other. Every other choice is forced too (HYPATIA_CUBLASLT_AUTOTUNE=0: the
heuristic's first candidate that passes the probes, untimed), so that no result or assertion
depends on timings, which a busy GPU (8 pytest workers) skews. Skipped without a GPU."""
import re

import pytest

from conftest import autotuner_log, requires_cuda

pytestmark = requires_cuda


def run_cases(*args):
    return autotuner_log("skinny_linear_cases.py", *args,
                         env={"HYPATIA_SKINNY_LINEAR": "1", "HYPATIA_CUBLASLT_AUTOTUNE": "0",
                              "HYPATIA_DISABLE_NARROW_MLP": "1", "HYPATIA_CUBLASLT_SEARCH": None})


def forward_problems(lines):
    """The log lines of forward problems (TN: x @ w.T), which the kernel covers when M <= 256."""
    return [line for line in lines if re.match(r"hypatia cuBLASLt \d+x\d+x\d+ TN ", line)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("check", ["forward", "nonfinite"])
def test_matches_float64_and_eager(check, dtype):
    lines = forward_problems(run_cases(check, dtype))
    assert lines and all(line.endswith("chosen: own") for line in lines), lines


def test_gradients_through_its_forward():
    lines = run_cases("gradients")
    assert any(line.endswith("chosen: own") for line in forward_problems(lines)), lines


def test_runs_in_the_profile_and_in_cuda_graphs():
    assert forward_problems(run_cases("graph_and_profile"))


def test_problems_it_does_not_cover_run_as_before():
    lines = forward_problems(run_cases("uncovered"))
    own = [line for line in lines if line.endswith("chosen: own")]
    assert len(lines) == 3 and [line.split()[2] for line in own] == ["24x4x8"], lines  # K 6 padded to 8
