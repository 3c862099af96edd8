"""The sm_90a kernels (the medium forward, the one-pass layer backward) as ptxas builds them: no
wgmma serialized and no register spills. ptxas serializes every wgmma of a kernel with one in a
divergent path (its "Potential Performance Loss" notes: C7520 for a branch around a k16 step, C7514
and C7518 in the layer backward), which made the medium kernel 1.8x slower and still exact, so no
GPU test can see it (docs/perf/experiments.md, "Medium forward up to 512 wide" and "A 256-wide
layer's backward in one pass"). Compiles each file alone with the build's own command line (from
its build.ninja), for sm_90a only, with -Xptxas -v. Needs no GPU; skipped where the build has no
sm_90a kernels, no Ninja file, or was configured for another checkout."""
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HYPATIA_BUILD_DIR", ROOT / "build"))


def sm90a_command(source, tmp_path):
    """The build's command for `source`, compiling sm_90a alone into tmp_path, ptxas verbose; or a
    reason to skip."""
    ninja = shutil.which("ninja")
    if ninja is None or not (BUILD / "build.ninja").is_file():
        return None, f"no ninja or no {BUILD / 'build.ninja'}"
    listed = subprocess.run([ninja, "-C", str(BUILD), "-t", "commands"], capture_output=True, text=True)
    lines = [line for line in listed.stdout.splitlines() if f" {source} " in f"{line} "]
    if listed.returncode != 0 or not lines:
        return None, f"{BUILD} does not compile {source} (no CUDA kernels, or another checkout's build)"
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
    return command + ["-o", str(tmp_path / "kernel.o"), "-Xptxas", "-v"], None


# (file, entry function, instances): half and bfloat16, the medium forward each with and without
# narrow ends, the layer backward each with its three kinds of dx (none, masked, plain).
KERNELS = [("medium_mlp_kernel.cu", "medium_mlp_forward_kernel", 4),
           ("layer_backward_kernel.cu", "layer_backward_kernel", 6)]


@pytest.mark.parametrize("source, kernel, instances", KERNELS)
def test_no_serialized_wgmma_or_spills(source, kernel, instances, tmp_path):
    command, reason = sm90a_command(ROOT / "ops" / "cuda" / source, tmp_path)
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
    found = [e for e in entries if f"{len(kernel)}{kernel}I" in e[0]]  # the mangled template's name
    assert len(found) == instances, report[-2000:]
    assert all(stores == "0" and loads == "0" for _, stores, loads in found), found
