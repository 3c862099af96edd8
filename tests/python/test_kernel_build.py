"""The medium forward kernel as ptxas builds it for sm_90a: no wgmma serialized and no register
spills. ptxas serializes every wgmma of a kernel with one in a divergent path (its "Potential
Performance Loss" notes, C7520 for a branch around a k16 step), which made the kernel 1.8x slower
and still exact, so no GPU test can see it (docs/perf/experiments.md, "Medium forward up to 512
wide"). Compiles ops/cuda/medium_mlp_kernel.cu alone with the build's own command line (from its
build.ninja), for sm_90a only, with -Xptxas -v. Needs no GPU; skipped where the build has no sm_90a
kernels, no Ninja file, or was configured for another checkout."""
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HYPATIA_BUILD_DIR", ROOT / "build"))
SOURCE = ROOT / "ops" / "cuda" / "medium_mlp_kernel.cu"


def sm90a_command(tmp_path):
    """The build's command for SOURCE, compiling sm_90a alone into tmp_path, ptxas verbose; or a
    reason to skip."""
    ninja = shutil.which("ninja")
    if ninja is None or not (BUILD / "build.ninja").is_file():
        return None, f"no ninja or no {BUILD / 'build.ninja'}"
    listed = subprocess.run([ninja, "-C", str(BUILD), "-t", "commands"], capture_output=True, text=True)
    lines = [line for line in listed.stdout.splitlines() if f" {SOURCE} " in f"{line} "]
    if listed.returncode != 0 or not lines:
        return None, f"{BUILD} does not compile {SOURCE} (no CUDA kernels, or another checkout's build)"
    words = shlex.split(lines[0])
    if "-gencode=arch=compute_90a,code=sm_90a" not in words:
        return None, "Hopper (sm_90a) is not among the build's architectures"
    command, skip = [], 0
    for word in words:
        if skip:
            skip -= 1
        elif word in ("-MT", "-MF", "-o"):  # the build's dependency file and object stay untouched
            skip = 1
        elif word == "-MD" or word.startswith("--generate-code=") or (
                word.startswith("-gencode=") and word != "-gencode=arch=compute_90a,code=sm_90a"):
            continue
        else:
            command.append(word)
    return command + ["-o", str(tmp_path / "medium.o"), "-Xptxas", "-v"], None


def test_medium_kernel_has_no_serialized_wgmma_or_spills(tmp_path):
    command, reason = sm90a_command(tmp_path)
    if command is None:
        pytest.skip(reason)
    built = subprocess.run(command, capture_output=True, text=True, cwd=BUILD)
    assert built.returncode == 0, built.stderr[-2000:]
    report = built.stdout + built.stderr
    losses = [line for line in report.splitlines() if "Performance Loss" in line]
    assert not losses, "\n".join(losses)
    # Each entry's properties follow its "Compiling entry function '...' for 'sm_90a'" line.
    entries = re.findall(r"Compiling entry function '(\w+)' for 'sm_90a'.*?(\d+) bytes spill stores, (\d+) bytes "
                         r"spill loads", report, flags=re.S)
    forward = [e for e in entries if "medium_mlp_forward_kernel" in e[0]]
    assert len(forward) == 4, report[-2000:]  # half and bfloat16, each with and without narrow ends
    assert all(stores == "0" and loads == "0" for _, stores, loads in forward), forward
