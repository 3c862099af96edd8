"""Reads `perf script -F time,ip,sym` (no call graphs) on stdin and prints each leaf function's share
of the samples from the first to the last in a function whose name starts with PREFIX (the library's
calls, without the import, the inputs' set-up and the exit).
Usage: perf script -F time,ip,sym | python leaf_share.py PREFIX"""
import collections
import sys

prefix = sys.argv[1]
samples = []
for line in sys.stdin:
    time, _ip, symbol = (line.strip().split(None, 2) + ["", ""])[:3]
    samples.append((float(time.rstrip(":")), symbol))
inside = [i for i, (_, symbol) in enumerate(samples) if symbol.startswith(prefix)]
counts = collections.Counter(symbol for _, symbol in samples[inside[0]:inside[-1] + 1])
total = sum(counts.values())
print(f"# {total} samples from the first {prefix} one to the last, by leaf function (those of 0.1% or more)")
for symbol, n in counts.most_common():
    if n / total >= 0.001:
        print(f"{100 * n / total:6.2f}%  {symbol[:110]}")
