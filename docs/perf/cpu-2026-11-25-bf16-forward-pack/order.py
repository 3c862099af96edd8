"""Whether the order of the calls moves the ratio of fused_linear_relu bfloat16 1024x784->2048 to
eager: the two taking turns call by call, against blocks of 30 calls each (as bench_ops.py's rounds
time them), the two orders alternating 8 times in one process.

    python order.py LIBRARY.so THREADS"""
import statistics
import sys
import time
import warnings

import torch

warnings.filterwarnings("ignore", category=DeprecationWarning)
torch.ops.load_library(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))
M, K, N = 1024, 784, 2048
gen = torch.Generator().manual_seed(0)
xs = [torch.randn(M, K, generator=gen).bfloat16() for _ in range(40)]
w = (torch.randn(N, K, generator=gen) / K**0.5).bfloat16()
b = (torch.randn(N, generator=gen) * 0.5).bfloat16()
calls = {
    "hypatia": lambda x: torch.ops.hypatia.fused_linear_relu(x, w, b),
    "eager": lambda x: torch.relu(torch.nn.functional.linear(x, w, b)),
}
samples = {order: {name: [] for name in calls} for order in ("turns", "blocks")}
i = 0


def timed(order, name):
    global i
    t = time.perf_counter()
    calls[name](xs[i % len(xs)])
    samples[order][name].append(time.perf_counter() - t)
    i += 1


with torch.no_grad():
    for _ in range(20):
        for name in calls:
            timed("turns", name)
    samples = {order: {name: [] for name in calls} for order in ("turns", "blocks")}
    for _ in range(8):
        for _ in range(30):
            for name in calls:
                timed("turns", name)
        for name in calls:
            for _ in range(30):
                timed("blocks", name)
for order, by_name in samples.items():
    hyp, eager = (statistics.median(by_name[n]) for n in ("hypatia", "eager"))
    print(f"{order:7s} hypatia {1e3 * hyp:6.3f} ms  eager {1e3 * eager:6.3f} ms  eager/hypatia {eager / hyp:5.3f}")
