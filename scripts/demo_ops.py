"""Runs both hypatia ops on a small bundled example (CUDA when present, else CPU) and prints
them against eager PyTorch, with the relative error against a float64 reference."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hypatia_ops  # noqa: E402

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x = torch.randn(4, 784, device=device)
w1, b1 = torch.randn(256, 784, device=device) / 28, torch.randn(256, device=device)
w2, b2 = torch.randn(10, 256, device=device) / 16, torch.randn(10, device=device)


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


with torch.no_grad():
    fused = hypatia_ops.fused_linear_relu(x, w1, b1)
    eager = F.relu(F.linear(x, w1, b1))
    ref = F.relu(F.linear(x.double(), w1.double(), b1.double()))
    print(f"device: {device}  torch {torch.__version__}  library {hypatia_ops.library_path()}")
    print(f"fused_linear_relu [4x784] -> [4x256]: rel. error fused {rel(fused, ref):.2e}, eager {rel(eager, ref):.2e}")
    print("  fused[0, :6]:", fused[0, :6].tolist())
    print("  eager[0, :6]:", eager[0, :6].tolist())

    logits = hypatia_ops.fused_mlp(x, [w1, w2], [b1, b2])
    eager = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
    ref = F.linear(F.relu(F.linear(x.double(), w1.double(), b1.double())), w2.double(), b2.double())
    print(f"fused_mlp 784-256-10: rel. error fused {rel(logits, ref):.2e}, eager {rel(eager, ref):.2e}")
    print("  fused argmax:", logits.argmax(-1).tolist(), " eager argmax:", eager.argmax(-1).tolist())
