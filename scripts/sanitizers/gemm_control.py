"""The racecheck control: PyTorch alone (no hypatia library loaded) runs weight-gradient-shaped GEMMs
(a long reduction over rows, a small output), which cuBLAS runs with its split-K kernels where it has
workspace. Under `compute-sanitizer --tool racecheck` it shows which hazards are cuBLAS's own
(docs/reliability/README.md#sanitizers)."""
import torch

for dtype in (torch.bfloat16, torch.float16, torch.float32):
    for rows in (1000, 5000):
        for n, k in ((32, 64), (64, 32), (64, 64), (16, 64), (64, 16), (8, 64)):
            g = torch.randn(rows, n, device="cuda", dtype=dtype)
            x = torch.randn(rows, k, device="cuda", dtype=dtype)
            (g.t() @ x).sum().item()
            (x.t() @ g).sum().item()
print("control done")
