"""What the autotuner's search costs at the first call of a shape, and what it buys: in a fresh
process per (problem, HYPATIA_CUBLASLT_SEARCH mode), the first fused_linear_relu forward (+ backward)
call's wall time (synchronized) and the median of the next 50 calls' CUDA-event times.
Usage: search_cost.py            (the table: spawns one process per row)
       search_cost.py ROW        (one row, in this process)"""
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))

PROBLEMS = [(m, k, n, dtype, train) for (m, k, n) in ((8192, 4096, 4096), (16384, 1024, 4096))
            for dtype in ("float32", "tf32", "bfloat16", "float16") for train in (False, True)]
MODES = ["", "heuristic"]  # unset: variants where a call is long; heuristic: the 8 picks only


def one(row):
    import hypatia_ops  # noqa: F401  (loads the library)
    m, k, n, dtype, train = PROBLEMS[row]
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = torch.float32 if dtype == "tf32" else getattr(torch, dtype)
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dt).requires_grad_(train)
    w = (torch.randn(n, k, device="cuda", dtype=dt) / k**0.5).requires_grad_(train)
    b = torch.randn(n, device="cuda", dtype=dt).requires_grad_(train)
    g = torch.randn(m, n, device="cuda", dtype=dt)

    def call():
        out = torch.ops.hypatia.fused_linear_relu(x, w, b)
        if train:
            out.backward(g)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    call()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    times = []
    for _ in range(50):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    print(f"{first * 1e3:.1f} {statistics.median(times):.4f}")


def table():
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| problem | dtype | pass | first call, search unset (ms) | first call, heuristic (ms) | "
          "then per call, unset (ms) | then per call, heuristic (ms) | heuristic / unset |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row, (m, k, n, dtype, train) in enumerate(PROBLEMS):
        results = []
        for mode in MODES:
            env = dict(os.environ)
            env.pop("HYPATIA_CUBLASLT_SEARCH", None)
            if mode:
                env["HYPATIA_CUBLASLT_SEARCH"] = mode
            proc = subprocess.run([sys.executable, __file__, str(row)], env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(proc.stderr)
            results.append([float(v) for v in proc.stdout.split()])
        (f_unset, t_unset), (f_heur, t_heur) = results
        print(f"| {m}x{k}->{n} | {dtype} | {'fwd+bwd' if train else 'fwd'} | {f_unset:.0f} | {f_heur:.0f} | "
              f"{t_unset:.4f} | {t_heur:.4f} | {t_heur / t_unset:.3f} |", flush=True)


if __name__ == "__main__":
    one(int(sys.argv[1])) if len(sys.argv) > 1 else table()
