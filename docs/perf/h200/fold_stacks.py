"""Summarizes a py-spy raw (folded) profile: of the samples whose stack holds a frame matching
WITHIN, the share in which each function appears (inclusive), largest first, functions named
without arguments or files. Usage: fold_stacks.py STACKS.txt WITHIN [TOP]"""
import re
import sys
from collections import Counter


def function(frame: str) -> str:
    name = re.sub(r" \(.*\)$", "", frame.strip())  # py-spy's " (file:line)"
    depth, out = 0, []
    for ch in name:  # drop template and argument lists, which make one function many names
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out) or name


def main():
    path, within = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    total, counts = 0, Counter()
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not n.isdigit() or within not in stack:
            continue
        frames = stack.split(";")
        first = next(i for i, f in enumerate(frames) if within in f)
        total += int(n)
        for name in {function(f) for f in frames[first:]}:
            counts[name] += int(n)
    print(f"{total} samples within {within}")
    for name, n in counts.most_common(top):
        print(f"{100 * n / max(total, 1):5.1f}%  {name[:150]}")


if __name__ == "__main__":
    main()
