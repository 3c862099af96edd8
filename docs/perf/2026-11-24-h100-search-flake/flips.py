"""How close the gradients-float32 case's pre-activations come to zero (cublaslt_search_cases.py's
data, rebuilt from the same seeds): a ReLU sign that float32 rounding can flip moves a gradient far
from float64's, whatever the GEMM's algorithm. Per layer: the smallest |z| in float64, the largest
|z32 - z64| of eager float32, and how many signs eager float32 flips."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "python"))
from conftest import linear_operands  # noqa: E402

dtype = torch.float32
m, k, n = 300, 96, 136
x, w, b = linear_operands((m,), k, n, dtype, 7)
w2, w3 = (torch.randn(72, n, device="cuda") / n**0.5).to(dtype), (torch.randn(40, 72, device="cuda") / 72**0.5).to(dtype)
b2, b3 = torch.randn(72, device="cuda").to(dtype), torch.randn(40, device="cuda").to(dtype)
h32, h64 = x, x.double()
for layer, (wi, bi) in enumerate(((w, b), (w2, b2), (w3, b3)), 1):
    z32, z64 = F.linear(h32, wi, bi), F.linear(h64, wi.double(), bi.double())
    flips = ((z32 > 0) != (z64 > 0)).sum().item()
    print(f"layer {layer}: {z64.numel()} outputs, min |z64| {z64.abs().min().item():.3e}, "
          f"max |z32 - z64| {(z32.double() - z64).abs().max().item():.3e}, eager float32 sign flips {flips}")
    h32, h64 = F.relu(z32), F.relu(z64)
