"""Issue 39's rows against what their GEMMs take alone. For each row, the GEMMs its forward and its
training step (forward, then per layer the input gradient and the weight gradient, as
graphed_training.py's step asks) must run, each timed alone from a CUDA graph of ten back-to-back
calls (no host; operands stay in L2 where they fit), at the faster of its two layouts (C = A B, or
C^T = B^T A^T, each by torch.mm); and the same GEMMs chained in one graph, the backward's on one
stream, then with each weight gradient on a second stream beside the next input gradient (what the
backward's dependencies allow). Beside them eager's and hypatia's forward and training step replayed
from CUDA graphs, in one process, and the goals' budgets: 70% of the forward's floor, 50% of the
step's, and 1.5x eager's graphed step. A budget below the GEMMs' sum asks the step's GEMMs to run
faster than cuBLAS runs them alone. Shapes, floors and data are scripts/bench_ops.py's.
Usage: python3 docs/perf/h100/step_gemms.py [--dtypes bfloat16,float16] [--rows dlrm-bottom,...]"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "h200"))
from bench_ops import Case, eager_fn, hypatia_fn, make_set, time_interleaved, timing_budget  # noqa: E402
from graphed_training import capture, graphed, rows_dtypes_and_ceilings  # noqa: E402

REPEATS = 10  # GEMM calls in one graph


def gemm(a, b):
    """torch.mm(a, b) into a buffer of its own, and its transposed layout (b.T @ a.T)."""
    out, out_t = a.new_empty(a.shape[0], b.shape[1]), a.new_empty(b.shape[1], a.shape[0])
    return (lambda: torch.mm(a, b, out=out)), (lambda: torch.mm(b.t(), a.t(), out=out_t))


def step_gemms(case, x, ws, gout):
    """The forward's GEMMs, then per layer from the top the input gradient and the weight gradient,
    on stand-in activations and gradients of the right shapes."""
    d, M = case.dims, case.M
    hs = [x] + [torch.randn(M, w, device="cuda", dtype=x.dtype) for w in d[1:-1]]
    gs = [torch.randn(M, w, device="cuda", dtype=x.dtype) for w in d[1:-1]] + [gout]
    fwd = [gemm(hs[i], ws[i].t()) for i in range(len(ws))]
    dgrad = [gemm(gs[i], ws[i]) for i in range(len(ws))]  # gs[i] is layer i's output gradient
    wgrad = [gemm(gs[i].t(), hs[i]) for i in range(len(ws))]
    return fwd, dgrad, wgrad


def chained(fwd, dgrad, wgrad, two_streams):
    """The step's GEMMs in order: forward, then from the top layer down the input gradient (the next
    layer's input) and the weight gradient, the latter on a second stream where two_streams."""
    side = torch.cuda.Stream()

    def work():
        main = torch.cuda.current_stream()  # the capture's stream
        for f, _ in fwd:
            f()
        for i in reversed(range(len(dgrad))):
            if two_streams:
                side.wait_stream(main)  # layer i's output gradient: the input gradient just issued above it
                with torch.cuda.stream(side):
                    wgrad[i][0]()
            else:
                wgrad[i][0]()
            dgrad[i][0]()
        if two_streams:
            main.wait_stream(side)

    return work


def main():
    rows, dtypes, ceilings = rows_dtypes_and_ceilings()
    print("| row | dtype | fwd: floor / 70% budget / GEMMs alone / eager, hypatia graphed | step: floor / 50% budget "
          "/ GEMMs alone / chained one stream, two / eager, hypatia graphed / 1.5x eager budget |")
    print("| --- | --- | --- | --- |")
    budget = timing_budget("cuda", False)
    for name in rows:
        for dtype in dtypes:
            case = Case.named(name, dtype)
            x, ws, bs, gout = make_set(case, "cuda", True, torch.Generator("cuda").manual_seed(0))
            fwd, dgrad, wgrad = step_gemms(case, x.detach(), [w.detach() for w in ws], gout)
            timed = {}
            for kind, gemms in (("fwd", fwd), ("dgrad", dgrad), ("wgrad", wgrad)):
                for i, layouts in enumerate(gemms):
                    for j, call in enumerate(layouts):
                        g, _ = capture(lambda call=call: [call() for _ in range(REPEATS)])
                        timed[(kind, i, j)] = (lambda _, g=g: g.replay(), None)
            chains = {s: capture(chained(fwd, dgrad, wgrad, s))[0] for s in (False, True)}
            for s, g in chains.items():
                timed[("chain", s)] = (lambda _, g=g: g.replay(), None)
            for who, fn in (("eager", eager_fn(case)), ("hypatia", hypatia_fn(case))):
                timed[(who, "step")] = (lambda _, g=graphed(fn, x, ws, bs, gout)[0]: g.replay(), None)
                with torch.no_grad():
                    g, _ = capture(lambda fn=fn: fn(x, ws, bs))
                timed[(who, "fwd")] = (lambda _, g=g: g.replay(), None)
            ms = {k: m for k, (m, _, _) in time_interleaved(timed, 1, "cuda", budget).items()}
            alone = {kind: sum(min(ms[(kind, i, 0)], ms[(kind, i, 1)]) / REPEATS for i in range(len(ws)))
                     for kind in ("fwd", "dgrad", "wgrad")}
            fwd_floor, step_floor = (max(case.floors_ms(m, ceilings)) for m in ("fwd", "fwd+bwd"))
            us = lambda v: f"{1e3 * v:.1f}"  # noqa: E731
            print(f"| {name} | {dtype} | {us(fwd_floor)} / {us(fwd_floor / 0.7)} / {us(alone['fwd'])} / "
                  f"{us(ms[('eager', 'fwd')])}, {us(ms[('hypatia', 'fwd')])} | {us(step_floor)} / "
                  f"{us(step_floor / 0.5)} / {us(sum(alone.values()))} / {us(ms[('chain', False)])}, "
                  f"{us(ms[('chain', True)])} / {us(ms[('eager', 'step')])}, {us(ms[('hypatia', 'step')])} / "
                  f"{us(ms[('eager', 'step')] / 1.5)} |", flush=True)
            print("   per GEMM (us, layouts C = A B / C^T = B^T A^T): " + "; ".join(
                f"{kind} {i}: {us(ms[(kind, i, 0)] / REPEATS)} / {us(ms[(kind, i, 1)] / REPEATS)}"
                for kind in ("fwd", "dgrad", "wgrad") for i in range(len(ws))), flush=True)
            del timed, chains, fwd, dgrad, wgrad, x, ws, bs, gout
            torch.cuda.empty_cache()
    print("(us: medians of bursts of graph replays; floors and budgets from the ceilings above)")


if __name__ == "__main__":
    main()
