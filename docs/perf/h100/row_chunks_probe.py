"""Would the per-layer forward (cuBLASLt per layer) run faster over the rows in chunks, each chunk
through every layer before the next, so that a chunk's activations stay in L2 between layers
instead of passing through HBM? Issue 39's per-layer rows, hypatia's forward called on 1, 2 or 4 row
chunks (one fused_mlp call a chunk, outputs left apart: the concatenation a real change would not
need is not timed), timed as scripts/bench_ops.py times them (input sets rotating, bursts, interleaved
rounds: host time included) and replayed from a CUDA graph (GPU time alone).
Usage: python3 docs/perf/h100/row_chunks_probe.py [--rows mlp-512x4,...] [--dtypes bfloat16,float16]"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_ops import (Case, make_set, measure_ceilings, n_input_sets, rel_error, time_interleaved,  # noqa: E402
                       timing_budget)


def chunked(op, relu_last, sets, chunks):
    def call(i):
        x, ws, bs, _ = sets[i]
        rows = x.shape[0] // chunks
        with torch.no_grad():
            return [op(x[k * rows:(k + 1) * rows], ws, bs, relu_last) for k in range(chunks)]
    return call


def graph_of(call):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call(0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(0)
    return graph


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="mlp-512x4,mlp-1024x3,mlp-1024x2,dlrm-top")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--chunks", default="1,2,4")
    args = p.parse_args()
    dtypes = args.dtypes.split(",")
    ceilings = measure_ceilings("cuda", dtypes, False, None)
    op = torch.ops.hypatia.fused_mlp.default
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| row | dtype | chunks | ms (bench's timing) | % of floor | ms graphed | % of floor graphed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.rows.split(","):
        for dtype in dtypes:
            case = Case.named(name, dtype)
            gen = torch.Generator("cuda").manual_seed(0)
            sets = [make_set(case, "cuda", False, gen) for _ in range(n_input_sets(case, "fwd", "cuda"))]
            counts = [int(c) for c in args.chunks.split(",")]
            calls = {c: chunked(op, case.relu_last, sets, c) for c in counts}
            whole = torch.cat(calls[counts[0]](0)).double()
            for c in counts[1:]:  # chunks compute what one call does (a GEMM chosen per shape may round differently)
                assert rel_error(torch.cat(calls[c](0)), whole) < 1e-2, (name, dtype, c)
            timed = time_interleaved({c: (call, None) for c, call in calls.items()}, len(sets), "cuda",
                                     timing_budget("cuda", False))
            graphs = {c: graph_of(call) for c, call in calls.items()}
            replayed = time_interleaved({c: (lambda i, g=g: g.replay(), None) for c, g in graphs.items()}, 1, "cuda",
                                        timing_budget("cuda", False))
            floor_ms = max(case.floors_ms("fwd", ceilings))
            for c in counts:
                ms, ms_graph = timed[c][0], replayed[c][0]
                print(f"| {name} | {dtype} | {c} | {ms:.4f} | {100 * floor_ms / ms:.1f} | {ms_graph:.4f} | "
                      f"{100 * floor_ms / ms_graph:.1f} |", flush=True)
            del sets, calls, graphs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
