"""The medium forward alone (HYPATIA_MEDIUM_MLP=1 forces it), bf16, no grad, over the shapes it takes
and row counts: µs a call, median of 7 bursts of 20 back-to-back calls. One line per case:
widths rows us. Run once per library (HYPATIA_OPS_LIBRARY) to compare two kernels."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401

assert os.environ.get("HYPATIA_MEDIUM_MLP") == "1", "run with HYPATIA_MEDIUM_MLP=1"
SHAPES = [[256] * 5, [13, 512, 256, 64], [16, 256, 256, 64], [256, 512, 256], [512, 256, 256, 256],
          [64, 256, 64], [256, 256, 256], [128, 256, 256, 128]]
ROWS = [2048, 16384, 65536, 262144]


def timed(f, calls=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    samples = []
    for _ in range(7):
        start.record()
        for _ in range(calls):
            f()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls * 1000)
    return sorted(samples)[3]


for widths in SHAPES:
    for rows in ROWS:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(rows, widths[0], device="cuda", dtype=torch.bfloat16, generator=g)
        ws = [torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) / i**0.5
              for i, o in zip(widths, widths[1:])]
        bs = [torch.randn(o, device="cuda", dtype=torch.bfloat16, generator=g) for o in widths[1:]]
        with torch.no_grad():
            us = timed(lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, False))
        print(f"{'-'.join(map(str, widths))} {rows} {us:.1f}", flush=True)
