"""scripts/sanitizers/by_kernel.py: compute-sanitizer's reports counted by kernel, each kernel's
first report kept, everything else written through."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sanitizers" / "by_kernel.py"

LOG = """\
## initcheck: test_x
========= COMPUTE-SANITIZER
Running main()
========= Uninitialized __global__ memory read of size 16 bytes
=========     at void k_one<float>(const float *)+0x560
=========     by thread (96,0,0) in block (0,0,0)
=========
========= Uninitialized __global__ memory read of size 2 bytes
=========     at void k_one<float>(const float *)+0x570
=========     by thread (1,0,0) in block (0,0,0)
=========
..========= Error: Race reported between Read access at nvjet_a+0xb20
=========     and Write access at nvjet_a+0x3070 [24 hazards]
========= Warning: Error buffer overflow has been detected. Some records have been dropped
[  PASSED  ] 1 test.
========= ERROR SUMMARY: 3 errors
"""


def test_counts_reports_by_kernel_and_keeps_each_kernels_first():
    out = subprocess.run([sys.executable, str(SCRIPT)], input=LOG, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[-3:] == [
        "========= reports by kernel: 3 in 2 kernels (each kernel's first report above)",
        "=========            2  void k_one<float>(const float *)",
        "=========            1  nvjet_a",
    ]
    assert out.count("+0x560") == 1 and "+0x570" not in out  # k_one's second report dropped
    assert "..========= Error: Race reported between Read access at nvjet_a+0xb20" in out  # progress dots kept
    assert "and Write access at nvjet_a+0x3070" in out
    # lines that are not reports, a message without a kernel, and the summary go through
    for kept in ("## initcheck: test_x", "Running main()", "[  PASSED  ] 1 test.", "Error buffer overflow",
                 "========= ERROR SUMMARY: 3 errors"):
        assert kept in out
