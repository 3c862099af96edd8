"""Why do the per-layer rows' forwards (mlp-1024x2, mlp-512x4, mlp-1024x3) run slower in
bench_ops.py, which rotates input sets through memory, than with one set (search_probe.py)?
Times hypatia's and eager's forward of each row four ways, in one process, with bench_ops.py's
own sets and burst size: bursts of calls as the bench issues them (its sets rotating), bursts on
one set, the rotating burst replayed from a CUDA graph (GPU time alone), and the host's time to
issue a call (perf_counter over a burst, no synchronization inside). Each burst is timed by CUDA
events and synchronized before the next (the bench synchronizes after all of its samples, so a
host-bound call can lose less there). Medians of SAMPLES bursts, µs a call.
Usage: python3 docs/perf/h200/forward_rotation.py [ROW ...] (from the repository root)."""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import bench_ops as B  # noqa: E402  (loads the library)

SAMPLES = 31


def median_us(fn, bursts=SAMPLES):
    """Median µs a call over `bursts` event-timed runs of fn, which returns its call count."""
    out = []
    for _ in range(bursts):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        calls = fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / calls)
    return statistics.median(out) * 1e3


def measure(fn, sets):
    """(calls a burst, {way: µs a call}) of fn's forward over the sets."""
    call = B.step_fn(fn, "fwd", sets)
    for i in range(3 * len(sets)):
        call(i % len(sets))
    torch.cuda.synchronize()
    t = time.perf_counter()
    call(0)
    torch.cuda.synchronize()
    burst = B.burst_size(time.perf_counter() - t, "cuda")
    counter = iter(range(10 ** 9))

    def rotating():
        for _ in range(burst):
            call(next(counter) % len(sets))
        return burst

    def one_set():
        for _ in range(burst):
            call(0)
        return burst

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(burst):
            call(i % len(sets))

    def replay():
        graph.replay()
        return burst

    host = []
    for _ in range(SAMPLES):
        torch.cuda.synchronize()
        t = time.perf_counter()
        rotating()
        host.append((time.perf_counter() - t) / burst * 1e6)
    torch.cuda.synchronize()
    res = {k: median_us(f) for k, f in (("bench", rotating), ("one set", one_set), ("graph", replay))}
    res["host"] = statistics.median(host)
    del graph
    return burst, res


def main():
    gen = torch.Generator(device="cuda").manual_seed(0)
    for row in sys.argv[1:] or ["mlp-1024x2", "mlp-512x4", "mlp-1024x3"]:
        for dtype in ("bfloat16", "float16"):
            case = B.Case.named(row, dtype)
            n = B.n_input_sets(case, "fwd", "cuda")
            sets = [B.make_set(case, "cuda", False, gen) for _ in range(n)]
            # at the GEMM rates bench_ops.py measured on this machine (a748286's runs)
            floor_us = case.flops("fwd") / (803e12 if dtype == "bfloat16" else 773e12) * 1e6
            for name, fn in (("hypatia", B.hypatia_fn(case)), ("eager", B.eager_fn(case))):
                burst, r = measure(fn, sets)
                print(f"{row} {dtype} {name}: {n} sets, bursts of {burst}; bench {r['bench']:.1f} us, "
                      f"one set {r['one set']:.1f}, graph {r['graph']:.1f}, host issue {r['host']:.1f} us a call; "
                      f"flop floor {floor_us:.1f} (bench {100 * floor_us / r['bench']:.0f}%, "
                      f"graph {100 * floor_us / r['graph']:.0f}%)", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
