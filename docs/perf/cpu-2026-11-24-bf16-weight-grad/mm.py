"""Eager's bfloat16 weight gradient on the same shapes: g.t() @ h by ATen's mm (oneDNN), four rounds.
usage: mm.py THREADS M N K"""
import sys
import time

import torch

threads, m, n, k = map(int, sys.argv[1:])
torch.set_num_threads(threads)
g, h = torch.randn(m, n).bfloat16(), torch.randn(m, k).bfloat16()
for _ in range(4):
    t = time.perf_counter()
    g.t().mm(h)
    ms = (time.perf_counter() - t) * 1e3
    print(f"m{m} n{n} k{k}: mm {ms:.1f} ms = {2 * m * n * k / ms / 1e6:.1f} GFLOP/s")
