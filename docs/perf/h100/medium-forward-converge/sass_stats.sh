#!/usr/bin/env bash
# Counts in the sm_90a code of each bf16 medium_mlp_forward_kernel instance of an object file (the
# kernel's object, built by build-gpu's own compile command): instructions, wgmma (HGMMA), stmatrix
# (STSM), warp syncs and the collective (unproven-convergence) paths ptxas wraps around shuffles.
# usage: sass_stats.sh medium_mlp_kernel.cu.o   ($CUOBJDUMP, else cuobjdump on PATH)
"${CUOBJDUMP:-cuobjdump}" -sass "$1" 2>/dev/null | python3 -c '
import collections, re, sys
arch = fn = None
stats = collections.defaultdict(collections.Counter)
for line in sys.stdin:
    if m := re.search(r"arch = (\S+)", line):
        arch = m.group(1)
    if m := re.search(r"Function : (\S+)", line):
        fn = m.group(1)
    m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(.*)", line)
    if m and arch == "sm_90a" and fn and "medium_mlp_forward" in fn and "bfloat16" in fn:
        s, ins = stats["narrow-ends" if "Lb1E" in fn else "wide"], m.group(1)
        s["instructions"] += 1
        for op in ("HGMMA", "STSM", "WARPSYNC.ALL", "COLLECTIVE"):
            s[op] += op in ins
for k, v in sorted(stats.items()):
    print(k, dict(v))
'
