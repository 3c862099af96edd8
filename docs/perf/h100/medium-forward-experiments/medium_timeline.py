"""Where a row block's time goes in the medium forward: clock64 stamps of each CTA's second and third
row blocks, from a library built with -DHYPATIA_PROBE_TIMELINE (timeline.patch; one launch, bf16,
65536 rows, no grad). Per layer half, for each consumer group, median cycles over the CTAs of:
waiting for its first weight slice, issuing its MMAs (with the waits for later slices), their drain
(wgmma wait), the epilogue, and the gap to the next half (the last half of the second block: to the
third block's first); the third block's input taken from the ring (or read, for a ragged input) and
what lies around it; then the producer's waits for a free stage, per slice of the second block.
Usage: HYPATIA_OPS_LIBRARY=<probe library> python3 docs/perf/h200/medium_timeline.py [dlrm-bottom|mlp-256x4]"""
import ctypes
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401

SHAPES = {"dlrm-bottom": ([13, 512, 256, 64], True), "mlp-256x4": ([256] * 5, False)}
CTAS, EVENTS = 132, 64
PHASES = ["wait first slice", "issue MMAs", "MMA drain", "epilogue", "gap to next"]


def stamps(name):
    widths, relu_last = SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(65536, widths[0], device="cuda", dtype=torch.bfloat16, generator=g)
    ws = [torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) / i**0.5 for i, o in zip(widths, widths[1:])]
    bs = [torch.randn(o, device="cuda", dtype=torch.bfloat16, generator=g) for o in widths[1:]]
    with torch.no_grad():
        for _ in range(5):
            torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)
    torch.cuda.synchronize()
    lib = ctypes.CDLL(os.environ["HYPATIA_OPS_LIBRARY"])
    buf = (ctypes.c_longlong * (CTAS * 3 * EVENTS))()
    assert lib.hypatia_probe_timeline(buf) == 0, "cudaMemcpyFromSymbol failed"
    return [[list(buf[(cta * 3 + role) * EVENTS:(cta * 3 + role + 1) * EVENTS]) for role in range(3)]
            for cta in range(CTAS)]


def report(name):
    ctas = stamps(name)
    halves = next(k for k in range(EVENTS // 5 + 1) if 5 * k + 4 >= EVENTS or ctas[0][0][5 * k + 4] == 0)
    print(f"== {name}: {halves} layer halves a row block; median cycles over {CTAS} CTAs")
    for group in (0, 1):
        print(f"consumer group {group}: half | " + " | ".join(PHASES))
        for k in range(halves):
            row = []
            for i in range(5):
                spans = []
                for cta in ctas:
                    t = cta[group]
                    end = t[5 * (k + 1)] if i == 4 else t[5 * k + i + 1]
                    if i == 4 and k + 1 == halves:
                        continue
                    spans.append(end - t[5 * k + i])
                row.append(f"{statistics.median(spans):.0f}" if spans else "-")
            print(f"  {k} | " + " | ".join(row))
        per = halves // 2
        block = [cta[group][5 * per] - cta[group][0] for cta in ctas]
        print(f"  the second block, its first start to the third's: {statistics.median(block):.0f}")
        med = lambda f: statistics.median(f(cta[group]) for cta in ctas)  # noqa: E731
        print(f"  its stores issued {med(lambda t: t[40] - t[5 * per - 1]):.0f}, their reads {med(lambda t: t[41] - t[40]):.0f}, "
              f"barrier {med(lambda t: t[42] - t[41]):.0f}, to the take {med(lambda t: t[60] - t[42]):.0f}; "
              f"group 0's stage: wait {med(lambda t: t[43] - t[60]):.0f}, copy {med(lambda t: t[44] - t[43]):.0f}; "
              f"group 1's stage: wait {med(lambda t: t[45] - t[44]):.0f}, copy {med(lambda t: t[46] - t[45]):.0f}; "
              f"fence and barrier {med(lambda t: t[61] - t[46]):.0f}")
        print(f"  the third block's input: last epilogue's end to taking it {med(lambda t: t[60] - t[5 * per - 1]):.0f}, "
              f"taking it {med(lambda t: t[61] - t[60]):.0f}, then to the first half's start {med(lambda t: t[5 * per] - t[61]):.0f}")
    slices = next(s for s in range(EVENTS // 2) if ctas[0][2][2 * s + 1] == 0)
    waits = [statistics.median(cta[2][2 * s + 1] - cta[2][2 * s] for cta in ctas) for s in range(slices)]
    print(f"producer: waits for a free stage, cycles, slice by slice: {' '.join(f'{w:.0f}' for w in waits)}")


for shape in sys.argv[1:] or list(SHAPES):
    report(shape)
