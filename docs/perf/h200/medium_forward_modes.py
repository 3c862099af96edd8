"""dlrm-bottom's medium forward (bf16, 65536 rows) in one mode, for ncu: `inference` (no grad: only
the last layer's output leaves the kernel) or `training` (every layer's output is kept for the
backward). Run under `ncu --kernel-name regex:medium_mlp_forward --launch-skip 3 --launch-count 1`;
the fifth launch is the one measured. Usage: medium_forward_modes.py inference|training."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401

mode = sys.argv[1]
widths, rows = [13, 512, 256, 64], 65536
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(rows, widths[0], device="cuda", dtype=torch.bfloat16, generator=g)
ws = [(torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) / i**0.5).requires_grad_(mode == "training")
      for i, o in zip(widths, widths[1:])]
bs = [torch.randn(o, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(mode == "training")
      for o in widths[1:]]
for _ in range(6):
    out = torch.ops.hypatia.fused_mlp(x, ws, bs, True)
torch.cuda.synchronize()
print(mode, "grad_fn" if out.grad_fn is not None else "no grad_fn", tuple(out.shape))
