"""ncu target: mlp-256x4's training step at 65536 rows, bf16 (per-layer path with the one-pass layer backward)."""
import sys
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hypatia_ops  # noqa: E402,F401
torch.manual_seed(0)
rows, dtype = 65536, torch.bfloat16
x = torch.randn(rows, 256, device="cuda", dtype=dtype).requires_grad_()
ws = [(torch.randn(256, 256, device="cuda") / 16).to(dtype).requires_grad_() for _ in range(4)]
bs = [torch.randn(256, device="cuda", dtype=dtype).requires_grad_() for _ in range(4)]
gout = torch.randn(rows, 256, device="cuda", dtype=dtype)
for _ in range(3):
    torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, False), [x] + ws + bs, gout)
torch.cuda.synchronize()
