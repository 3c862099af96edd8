"""The narrow-input backward kernel (ops/cuda/narrow_input_backward_kernel.cu): an MLP's bottom layer
with at most 16 input features, its ReLU backward, bias, weight and input gradients in one pass,
against float64 from the same saved outputs (every shape, bias pattern and choice of gradients;
strided and transposed operands; NaN and Inf), through autograd, and where it does not apply. Run
with the kernel and, as a check of the checks, with HYPATIA_NARROW_INPUT_BACKWARD=0 (the per-layer
path, which must pass them too; read once per process, hence the subprocess). Skipped without a GPU."""
import pytest

from conftest import autotuner_log, requires_cuda

pytestmark = requires_cuda


@pytest.mark.parametrize("switch", [None, "0"], ids=["kernel", "per-layer"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("check", ["shapes", "operands", "nonfinite", "training"])
def test_matches_float64(check, dtype, switch):
    autotuner_log("narrow_input_backward_cases.py", check, dtype,
                  env={"HYPATIA_NARROW_INPUT_BACKWARD": switch, "HYPATIA_DISABLE_NARROW_MLP": "1"})
