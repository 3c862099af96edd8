"""The one-pass backward of a 256 -> 256 layer (ops/cuda/layer_backward_kernel.cu), taken by
default wherever it applies (HYPATIA_LAYER_BACKWARD unset; the library reads it once per process,
hence the subprocesses), checked against float64 and eager with the profiler counting its launches;
declined operands; the switch off. Skipped without an sm_90 GPU."""
import pytest
import torch

from conftest import autotuner_log, requires_cuda

pytestmark = [
    requires_cuda,
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the kernel is sm_90a code"),
]

PER_LAYER = {"HYPATIA_DISABLE_NARROW_MLP": "1", "HYPATIA_MEDIUM_MLP": "0", "HYPATIA_CUBLASLT_AUTOTUNE": "0"}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("check", ["gradients", "weights_only", "noncontiguous", "nonfinite", "deterministic",
                                   "declined"])
def test_matches_float64_and_eager(check, dtype):
    autotuner_log("layer_backward_cases.py", check, dtype, env={"HYPATIA_LAYER_BACKWARD": None, **PER_LAYER})


def test_switched_off():
    autotuner_log("layer_backward_cases.py", "off", "bfloat16", env={"HYPATIA_LAYER_BACKWARD": "0", **PER_LAYER})
