"""fused_linear_relu bfloat16 forward, 1024x784->2048 (issue 5's row), with the ways of packing the
weight of variants.patch against the library's own and eager, from one process.

    python variants.py VARIANTS.so THREADS ROUNDS

Each round runs every competitor for a block of 20 calls in turn, as bench_ops.py's rounds do, each
round starting one competitor later than the one before (so that none always follows the same one); x
rotates over 40 sets (64 MiB, twice the L3) and the weight stays, as in the benchmark. Medians of
all samples; every variant's output must equal the library's own bit for bit."""
import os
import statistics
import sys
import time
import warnings

import torch

warnings.filterwarnings("ignore", category=DeprecationWarning)
lib, threads, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.ops.load_library(lib)
torch.set_num_threads(threads)
M, K, N = 1024, 784, 2048
gen = torch.Generator().manual_seed(0)
xs = [torch.randn(M, K, generator=gen).bfloat16() for _ in range(40)]
w = (torch.randn(N, K, generator=gen) / K**0.5).bfloat16()
b = (torch.randn(N, generator=gen) * 0.5).bfloat16()
ENV = ("HYP_PACK", "HYP_PACK_NT", "HYP_PACK_PREFETCH")
VARIANTS = {
    "library": {},
    "columns": {"HYP_PACK": "columns"},
    "fused+prefetch": {"HYP_PACK": "fused"},
    "nt-stores": {"HYP_PACK_NT": "1"},
    "pack-prefetch": {"HYP_PACK_PREFETCH": "4"},
}


def hypatia(env):
    def call(x):
        for key in ENV:
            os.environ.pop(key, None)
        os.environ.update(env)
        return torch.ops.hypatia.fused_linear_relu(x, w, b)
    return call


calls = {name: hypatia(env) for name, env in VARIANTS.items()}
calls["eager"] = lambda x: torch.relu(torch.nn.functional.linear(x, w, b))
times = {name: [] for name in calls}
with torch.no_grad():
    reference = calls["library"](xs[0])
    for name, call in calls.items():
        out = call(xs[0])
        assert torch.equal(out, reference) if name != "eager" else (out - reference).abs().max() < 0.1, name
    i = 0
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            call = calls[name]
            for _ in range(20):
                t = time.perf_counter()
                call(xs[i % len(xs)])
                times[name].append(time.perf_counter() - t)
                i += 1
library = statistics.median(times["library"])
eager = statistics.median(times["eager"])
print(f"threads {threads}, {rounds} rounds of 20 calls each")
for name, ts in times.items():
    ms = statistics.median(ts)
    print(f"  {name:15s} {1e3 * ms:7.3f} ms   library/this {library / ms:5.3f}   eager/this {eager / ms:5.3f}")
