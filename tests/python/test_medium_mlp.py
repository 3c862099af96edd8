"""The medium-MLP forward kernel (ops/cuda/medium_mlp_kernel.cu), forced by HYPATIA_MEDIUM_MLP=1
(read once per process, hence the subprocess), against float64 and eager: forward on ragged shapes
and several row blocks a CTA, the operands it leaves to the per-layer path, NaN/Inf, and the training
forward whose hidden outputs the backward reads; and, without the variable, the shapes it is chosen
for. Skipped without a GPU."""
import pytest

from conftest import autotuner_log, requires_cuda

pytestmark = requires_cuda


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("check", ["forward", "fallback", "nonfinite", "training"])
def test_matches_float64_and_eager(check, dtype):
    autotuner_log("medium_mlp_cases.py", check, dtype,
                  env={"HYPATIA_MEDIUM_MLP": "1", "HYPATIA_DISABLE_NARROW_MLP": "1", "HYPATIA_CUBLASLT_AUTOTUNE": "0"})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_chosen_where_measured_faster(dtype):
    autotuner_log("medium_mlp_cases.py", "policy", dtype,
                  env={"HYPATIA_MEDIUM_MLP": None, "HYPATIA_DISABLE_NARROW_MLP": None, "HYPATIA_CUBLASLT_AUTOTUNE": "0"})
