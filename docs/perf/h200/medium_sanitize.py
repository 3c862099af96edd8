"""The medium forward under compute-sanitizer: run as `compute-sanitizer --tool T python3 this`
with HYPATIA_MEDIUM_MLP=1 (and PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that memcheck sees each
tensor's own bounds). Shapes: several row blocks a CTA (the ring, the turns and the input's panels
across blocks), a ragged last block, widths that leave part of the tile unused, training forwards
whose hidden outputs are kept (one with several blocks a CTA), a last layer in two tiles, and DLRM's bottom MLP (13 features read element by element, a 512-wide layer in
two tiles, the consumers in step) and 16-256-128-256-64 (several blocks, with turns), both in the
narrow-ends instance (one k16 step for the first layer, m64n64 for the last). Prints each shape's
error against float64."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import hypatia_ops  # noqa: E402,F401
from bench_ops import rel_error  # noqa: E402

SHAPES = [(300, [256] * 5, False, False), (777, [64, 256, 160, 64], True, False),
          (1000, [128, 256, 256, 64], False, True), (40000, [256, 256, 64], False, False),
          (40000, [256, 256, 256, 96], False, True), (40000, [64, 256, 320], True, False),
          (2000, [13, 512, 256, 64], True, False), (40000, [16, 256, 128, 256, 64], False, False)]
for rows, widths, relu_last, training in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, widths[0], device="cuda", dtype=torch.bfloat16, generator=g)
    ws = [torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) / i**0.5
          for i, o in zip(widths, widths[1:])]
    bs = [torch.randn(o, device="cuda", dtype=torch.bfloat16, generator=g) for o in widths[1:]]
    if training:
        x.requires_grad_(True)
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)
    ref = x.detach().double()
    for i, (w, b) in enumerate(zip(ws, bs)):
        ref = torch.nn.functional.linear(ref, w.double(), b.double())
        if i + 1 < len(ws) or relu_last:
            ref = ref.relu()
    err = rel_error(out, ref)
    print(rows, widths, "training" if training else "inference", "rel err", f"{err:.3e}", flush=True)
