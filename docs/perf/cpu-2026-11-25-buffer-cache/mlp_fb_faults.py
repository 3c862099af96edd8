"""fused_mlp 8192x1024-4096 forward+backward (issue 5's row; the inputs of
../cpu-2026-11-24-mlp-bf16-profile/mlp_fb.py) or eager's, with the page faults of each call: 2 warm-up
calls, then CALLS timed ones, inputs and output gradients rotating over 3 sets; prints the median time
and the median minor faults per call (in MiB of 4 KiB pages), and the bytes the library's CPU buffer
cache keeps after the last call where it has one.
Usage: python mlp_fb_faults.py LIBRARY THREADS hyp|eager CALLS [DTYPE]"""
import resource
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
mode, calls = sys.argv[3], int(sys.argv[4])
dt = getattr(torch, sys.argv[5]) if len(sys.argv) > 5 else torch.bfloat16
sets, ws, bs, eager = case(dt)
fn = {"hyp": lambda x: torch.ops.hypatia.fused_mlp(x, ws, bs, False), "eager": eager}[mode]
times, faults = [], []
for i in range(2 + calls):
    x, grad_out = sets[i % 3]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    torch.autograd.grad(fn(x), [x] + ws + bs, grad_out)
    if i >= 2:
        times.append((time.perf_counter() - start) * 1e3)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
kept = torch.ops.hypatia._cpu_buffer_cache_bytes() if hasattr(torch.ops.hypatia, "_cpu_buffer_cache_bytes") else None
print(f"{mode} {dt} {sys.argv[2]} thread(s): median of {calls} calls {statistics.median(times):.0f} ms, "
      f"{statistics.median(faults) * 4 / 1024:.0f} MiB faulted in a call"
      + ("" if kept is None else f", {kept >> 20} MiB kept by the cache"), flush=True)
