"""fused_mlp's training step (forward, then every gradient) on 256-wide MLPs, for the one-pass layer
backward's bottom layer: run once per library (HYPATIA_OPS_LIBRARY: main's, where the bottom layer
runs its GEMMs, and the branch's) and per input (needing a gradient or not), rounds interleaved by
the caller. The step is captured in a CUDA graph (the GPU's time, without the host's:
plain calls of the small shapes are bound by the host) and replayed `reps` times a sample. Prints
one JSON line per (dtype, rows): the median us over 7 samples, and the step's peak memory above the
operands (uncaptured).
Usage: time_steps.py LABEL INPUT_GRAD(0|1) ROWS,ROWS,... [WIDTHS]"""
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hypatia_ops  # noqa: E402,F401

label, input_grad, rows_list = sys.argv[1], sys.argv[2] == "1", [int(r) for r in sys.argv[3].split(",")]
widths = [int(w) for w in sys.argv[4].split(",")] if len(sys.argv) > 4 else [256] * 5
for dtype in (torch.bfloat16, torch.float16):
    for rows in rows_list:
        torch.manual_seed(0)
        x = torch.randn(rows, widths[0], device="cuda", dtype=dtype).requires_grad_(input_grad)
        ws = [(torch.randn(n, k, device="cuda") / k**0.5).to(dtype).requires_grad_() for k, n in zip(widths, widths[1:])]
        bs = [torch.randn(n, device="cuda", dtype=dtype).requires_grad_() for n in widths[1:]]
        gout = torch.randn(rows, widths[-1], device="cuda", dtype=dtype)
        leaves = [x] * input_grad + ws + bs

        def step():
            return torch.autograd.grad(torch.ops.hypatia.fused_mlp(x, ws, bs, False), leaves, gout)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # autotuning and one-time queries happen outside the capture
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        reps = max(3, min(200, 2_000_000 // rows))
        samples = []
        for _ in range(7):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000 / reps)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20
        print(json.dumps({"label": label, "input_grad": input_grad, "dtype": str(dtype).split(".")[-1],
                          "rows": rows, "widths": widths,
                          "us": round(statistics.median(samples), 1), "min_us": round(min(samples), 1),
                          "peak_mb": round(peak_mb, 1)}), flush=True)
