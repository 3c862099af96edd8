"""The fused input-gradient kernel (ops/cuda/relu_input_grad_kernel.cu: a hidden layer's input
gradient with eager's ReLU backward in one CUTLASS GEMM on sm_90, the bias sums after it), forced onto every
problem it covers (HYPATIA_FUSED_INPUT_GRAD=1, read once per process, hence the subprocesses) and
checked against float64 and eager; the autotuner's log must name it for each covered problem and
for no other. Every other choice is forced too (HYPATIA_CUBLASLT_AUTOTUNE=0), so that no result
depends on timings. Skipped without a GPU, and where the kernel cannot run: a build without
CUTLASS (build_info()["cutlass_kernels"]) or a GPU other than sm_90."""
import pytest
import torch

import hypatia_ops
from conftest import autotuner_log, requires_cuda

pytestmark = [
    requires_cuda,
    pytest.mark.skipif(not hypatia_ops.build_info().get("cutlass_kernels"), reason="built without CUTLASS"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the kernel is sm_90 code"),
]


def run_cases(*args):
    return autotuner_log("fused_input_grad_cases.py", *args,
                         env={"HYPATIA_FUSED_INPUT_GRAD": "1", "HYPATIA_CUBLASLT_AUTOTUNE": "0",
                              "HYPATIA_DISABLE_NARROW_MLP": "1", "HYPATIA_CUBLASLT_SEARCH": None})


def input_grad_problems(lines):
    """The log lines of the input gradients through a ReLU (the DRELU problems the kernel covers)."""
    return [line for line in lines if " epilogue DRELU" in line]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gradients_match_float64(dtype):
    lines = input_grad_problems(run_cases("gradients", dtype))
    own = [line for line in lines if line.endswith("chosen: own")]
    # Every hidden width a multiple of 8 takes the kernel; 300 and 100 (the fourth shape) do not.
    assert own and all(" 300x" not in line and " 100x" not in line for line in own), lines
    assert len(lines) - len(own) == 2, lines


def test_noncontiguous_operands():
    lines = input_grad_problems(run_cases("noncontiguous", "bfloat16"))
    assert lines and all(line.endswith("chosen: own") for line in lines), lines


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_nan_and_inf_as_eager(dtype):
    lines = input_grad_problems(run_cases("nonfinite", dtype))
    assert lines and all(line.endswith("chosen: own") for line in lines), lines
