"""Counts compute-sanitizer's reports by the kernel they are in, for runs with millions of them
(sanitize.sh gpu with HYPATIA_SANITIZE_BY_KERNEL=1, which prints every report without host
backtraces). Reads the tool's output on stdin and writes it through, except that each kernel's
reports after its first are dropped; at the end, one line per kernel with its count.

A report starts at a `========= TEXT` line that is not a summary and runs until the next such line;
its kernel is on its first `... at KERNEL+0xOFFSET` line (initcheck's second, racecheck's first).
"""
import re
import sys
from collections import Counter

HEADER = re.compile(r"^========= \S")  # a report's (or summary's) first line; "=========" alone, or
# followed by spaces, continues a report
SUMMARY = re.compile(r"^========= (ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|COMPUTE-SANITIZER)")
KERNEL = re.compile(r"\bat (.+?)\+0x[0-9a-f]+$")


def main() -> None:
    counts: Counter = Counter()
    out = sys.stdout
    report: list[str] = []  # the report being read, until its kernel is known
    kernel = None  # the current report's kernel; None while unknown or outside a report
    in_report = False

    def flush_unattributed() -> None:
        # A report whose kernel line never came (another kind of message): written through.
        out.writelines(report)
        report.clear()

    for line in sys.stdin:
        cut = line.find("=========")
        if cut > 0:  # a report printed after pytest's progress dots: the dots go through as they are
            out.write(line[:cut])
            line = line[cut:]
        starts = HEADER.match(line) is not None
        if starts or not line.startswith("========="):
            if in_report and kernel is None:
                flush_unattributed()
            in_report, kernel = False, None
            report.clear()
            if not starts or SUMMARY.match(line):
                out.write(line)
                continue
            in_report = True
        # the report's first line (racecheck names the kernel there) or a continuation line
        if kernel is None:
            report.append(line)
            m = KERNEL.search(line.rstrip("\n"))
            if m:
                kernel = m.group(1)
                counts[kernel] += 1
                if counts[kernel] == 1:
                    out.writelines(report)
                report.clear()
        elif counts[kernel] == 1:
            out.write(line)
    if in_report and kernel is None:
        flush_unattributed()
    total = sum(counts.values())
    out.write(f"========= reports by kernel: {total} in {len(counts)} kernels (each kernel's first report above)\n")
    for name, n in counts.most_common():
        out.write(f"=========   {n:>10}  {name[:200]}\n")


if __name__ == "__main__":
    main()
