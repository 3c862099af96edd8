"""fused_mlp 8192x1024-4096 bfloat16 (issue 5's row, the inputs of
../cpu-2026-11-24-mlp-bf16-profile/mlp_fb.py) against eager in one process, in phases: the forward
without autograd, the forward that records for the backward, and the backward. The library and
eager take turns, one call of each phase a round, ROUNDS rounds after one warm-up round; prints each
phase's median and eager's time over the library's.
Usage: python phases.py LIBRARY THREADS ROUNDS"""
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cpu-2026-11-24-mlp-bf16-profile"))
from mlp_fb import case  # noqa: E402

warnings.filterwarnings("ignore")
torch.ops.load_library(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))
rounds = int(sys.argv[3])
sets, ws, bs, eager = case(torch.bfloat16)
fns = {"library": lambda x: torch.ops.hypatia.fused_mlp(x, ws, bs, False), "eager": eager}
phases = ("forward, no grad", "forward for backward", "backward")
ms = {(name, phase): [] for name in fns for phase in phases}


def seconds(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


for r in range(1 + rounds):
    for name, fn in fns.items():
        x, grad_out = sets[r % 3]
        with torch.no_grad():
            t_inference, _ = seconds(lambda: fn(x))
        t_forward, y = seconds(lambda: fn(x))
        t_backward, _ = seconds(lambda: torch.autograd.grad(y, [x] + ws + bs, grad_out))
        del y
        if r > 0:
            for phase, t in zip(phases, (t_inference, t_forward, t_backward)):
                ms[name, phase].append(t * 1e3)

median = {key: statistics.median(v) for key, v in ms.items()}
print(f"{sys.argv[2]} thread(s), median of {rounds} rounds")
print(f"{'phase':<32}{'library ms':>12}{'eager ms':>12}{'eager / library':>17}")
for phase in phases + ("forward + backward",):
    if phase == "forward + backward":
        lib = median["library", phases[1]] + median["library", phases[2]]
        eag = median["eager", phases[1]] + median["eager", phases[2]]
    else:
        lib, eag = median["library", phase], median["eager", phase]
    print(f"{phase:<32}{lib:>12.1f}{eag:>12.1f}{eag / lib:>17.3f}", flush=True)
