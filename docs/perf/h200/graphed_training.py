"""Issue 39's training rows with the host taken out: forward+backward (torch.autograd.grad of the MLP
w.r.t. input, weights and biases) of eager and hypatia, called as usual and replayed from a CUDA graph
of the whole step (torch.cuda.graph, after a warm-up that autotunes), side by side in one process.
Shapes, floors, input data and timing are scripts/bench_ops.py's (one input set here, the same for all
four; time_interleaved: CUDA events around bursts, medians, competitors in interleaved rounds). A
graphed step runs its kernels back to back, so its time is the kernels' alone; the difference to the
plain call is what the host costs.
Usage: python3 docs/perf/h200/graphed_training.py [--dtypes bfloat16,float16] [--rows dlrm-bottom,...]"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_ops import (NAMED_MLPS, Case, eager_fn, hypatia_fn, make_set, measure_ceilings,  # noqa: E402
                       rel_error, time_interleaved, timing_budget)


def step(fn, x, ws, bs, gout):
    return torch.autograd.grad(fn(x, ws, bs), [x] + ws + bs, gout)


def capture(work):
    """A CUDA graph of work() (warmed up on a side stream first, where the autotuner decides; a
    capture may not time) and what the captured call returned."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = work()
    return graph, out


def graphed(fn, x, ws, bs, gout):
    """A CUDA graph of one step: its replay and its gradients."""
    return capture(lambda: step(fn, x, ws, bs, gout))


def rows_dtypes_and_ceilings():
    """--rows and --dtypes, and the GEMM and copy ceilings measured here, printed as a header line."""
    p = argparse.ArgumentParser()
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--rows", default=",".join(n for n in NAMED_MLPS if n != "tiny-ragged"))
    args = p.parse_args()
    dtypes = args.dtypes.split(",")
    ceilings = measure_ceilings("cuda", dtypes, False, None)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; copy {ceilings['copy_GBps']:.0f} GB/s, GEMM "
          + ", ".join(f"{d} {v / 1e3:.0f} TFLOP/s" for d, v in ceilings["gemm_GFLOPs"].items()))
    return args.rows.split(","), dtypes, ceilings


def main():
    rows, dtypes, ceilings = rows_dtypes_and_ceilings()
    print("| row | dtype | eager | hypatia | eager graphed | hypatia graphed | hyp/eager | hyp/eager graphed "
          "| hyp graphed %floor | host share of hypatia |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in rows:
        for dtype in dtypes:
            case = Case.named(name, dtype)
            x, ws, bs, gout = make_set(case, "cuda", True, torch.Generator("cuda").manual_seed(0))
            fns = {"eager": eager_fn(case), "hypatia": hypatia_fn(case)}
            calls, grads = {}, {}
            for who, fn in fns.items():
                calls[who] = (lambda fn=fn: step(fn, x, ws, bs, gout))
                graph, grads[who] = graphed(fn, x, ws, bs, gout)
                calls[who + " graphed"] = graph.replay
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            # The graphed steps compute what the plain ones do: the same gradients as a plain step.
            plain = step(fns["hypatia"], x, ws, bs, gout)
            err = max(rel_error(g, p.double()) for g, p in zip(grads["hypatia"], plain))
            assert err < 1e-2, (name, dtype, err)
            timed = {who: (lambda i, call=call: call(), None) for who, call in calls.items()}
            ms = {who: m for who, (m, _, _) in time_interleaved(timed, 1, "cuda", timing_budget("cuda", False)).items()}
            floor_ms = max(case.floors_ms("fwd+bwd", ceilings))
            print(f"| {name} | {dtype} | {ms['eager']:.3f} | {ms['hypatia']:.3f} | {ms['eager graphed']:.3f} | "
                  f"{ms['hypatia graphed']:.3f} | {ms['eager'] / ms['hypatia']:.2f} | "
                  f"{ms['eager graphed'] / ms['hypatia graphed']:.2f} | {100 * floor_ms / ms['hypatia graphed']:.1f} | "
                  f"{100 * (1 - ms['hypatia graphed'] / ms['hypatia']):.0f}% |", flush=True)
            del calls, timed, grads, graph, plain, x, ws, bs, gout
            torch.cuda.empty_cache()
    print("(ms per forward+backward, medians; graphed gradients match a plain step's within 1e-2)")


if __name__ == "__main__":
    main()
