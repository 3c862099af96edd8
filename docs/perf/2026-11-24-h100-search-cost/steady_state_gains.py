"""From an autotuner log (HYPATIA_CUBLASLT_LOG=1, e.g. a bench.log), per long problem: the winner of
the steady-state rounds and the fastest heuristic pick in the same rounds, and how much faster the
winner ran. Both were timed in the same interleaved rounds, so the ratio is an in-process A/B of the
wider search against the heuristic's best candidate. Where no pick reached the finals (the 8 fastest),
the ratio is at least the slowest finalist's over the winner's (marked >=).
Usage: steady_state_gains.py LOG..."""
import re
import sys

for path in sys.argv[1:]:
    print(f"# {path}")
    print("| problem (cuBLAS m x n x k, ops, dtype, epilogue) | winner | ms | fastest pick | ms | pick / winner |")
    print("| --- | --- | --- | --- | --- | --- |")
    for line in open(path):
        if "in steady state" not in line:
            continue
        problem = line.split(":")[0].removeprefix("hypatia cuBLASLt ")
        finals = [(name, float(ms)) for name, ms in
                  (entry.split(":") for entry in line.split("in steady state")[1].split(";")[0].split())]
        winner = finals[0]
        picks = [f for f in finals if re.fullmatch(r"\d+", f[0])]
        if picks:
            ratio, pick, pick_ms = f"{picks[0][1] / winner[1]:.3f}", picks[0][0], f"{picks[0][1]:.4f}"
        else:
            ratio, pick, pick_ms = f">= {finals[-1][1] / winner[1]:.3f}", "none in the finals", ""
        print(f"| {problem} | {winner[0]} | {winner[1]:.4f} | {pick} | {pick_ms} | {ratio} |")
