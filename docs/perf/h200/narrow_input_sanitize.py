"""The narrow-input backward kernel under compute-sanitizer: run as `compute-sanitizer --tool T
--print-limit 1000000000 --show-backtrace no python3 this` with HYPATIA_CUBLASLT_AUTOTUNE=0 (as
scripts/sanitize.sh gpu runs its tools) and PYTORCH_NO_CUDA_MEMORY_CACHING=1 (so that memcheck sees
each tensor's own bounds). Not with `--kernel-name`: with a filter, racecheck fails ("Internal
Sanitizer Error ... hardware exception") on bf16 cuBLAS GEMMs with no library kernel in the process;
with the autotuner on, racecheck ends the process whether the kernel runs or not
(h200/narrow-input-sanitizer-h200.log, at d494b0f). initcheck reports every read of a cuBLAS GEMM's output, by
ATen's kernels too, so its reports of this kernel's gradient reads are not the kernel's. Shapes:
several row blocks a CTA, a ragged last block, one row, one, two and four 128-row tiles of outputs
with part of the tile unused, 1 and 16 input features, each choice of gradients (or only the shapes
whose indices are given as arguments). Prints each shape's largest error against float64."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401
from conftest import make_mlp, rel_error  # noqa: E402
from narrow_input_backward_cases import reference_backward, saved_outputs  # noqa: E402

SHAPES = [(20000, [13, 512, 64]), (1, [13, 512, 64]), (777, [1, 128, 32]), (300, [16, 200, 64]), (1000, [13, 392, 64])]
PICKED = [SHAPES[int(i)] for i in sys.argv[1:]] or SHAPES
for rows, widths in PICKED:
    for input_grad, params_grad in ((True, True), (True, False), (False, True)):
        torch.manual_seed(0)
        x = torch.randn(rows, widths[0], dtype=torch.float64).to(torch.bfloat16).cuda()
        ws, bs = make_mlp(widths, torch.bfloat16, device="cuda")
        # By float64 GEMMs, so that no 16-bit cuBLAS kernel runs outside the library; the reference
        # backward starts from the same rounded outputs.
        saved = [h.to(torch.bfloat16) for h in saved_outputs(x.double(), [w.double() for w in ws],
                                                             [b.double() for b in bs], False)]
        gout = torch.randn(rows, widths[-1], dtype=torch.float64).to(torch.bfloat16).cuda()
        got = torch.ops.hypatia._fused_mlp_backward(gout, x, ws, saved, [True] * len(ws), False, input_grad, params_grad)
        want = reference_backward(gout, x, ws, saved, [True] * len(ws), False, torch.bfloat16)
        want = (want if params_grad else want[-1:])[: None if input_grad else -1]
        print(rows, widths, input_grad, params_grad, max(rel_error(g, r) for g, r in zip(got, want)), flush=True)
