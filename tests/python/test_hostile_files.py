"""Hostile files (issue 37 item 3): hypatia-fuse, hypatia-run and hypatia_ops.fuse_file on broken
and crafted model files and on bad output paths. Each case gives one printable error line and a
clean exit, leaves no output behind and never touches the input. The crafted files are made here,
from a small frozen model, by rewriting members of its zip archive; tests/hostile/mutate_pt.py does
the same at scale and the smoke test at the end runs a slice of it."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import hypatia_ops
from test_models_app import FUSE, RUN, requires_fuse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "hostile"))
import mutate_pt  # noqa: E402

pytestmark = requires_fuse


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """A frozen Linear-ReLU-Linear model (its weights are graph constants: constants.pkl and
    constants/N), 16 -> 64 -> 8."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    path = tmp_path_factory.mktemp("hostile") / "frozen.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.freeze(torch.jit.script(model)).save(str(path))
    return path


def rewrite(src: Path, dst: Path, change) -> Path:
    """dst: the archive src with change(name, data) applied to every member (None drops it)."""
    members = [(name, change(name, data)) for name, data in mutate_pt.read_members(src)]
    dst.write_bytes(mutate_pt.write_members([(n, d) for n, d in members if d is not None]))
    return dst


def largest_constant(src: Path) -> str:
    return max((m for m in mutate_pt.read_members(src) if "/constants/" in m[0]), key=lambda m: len(m[1]))[0]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_rejected_everywhere(src: Path, tmp_path: Path, text: str) -> None:
    """The three entry points refuse src with one printable line holding `text`, write nothing and
    leave src as it was."""
    before = sha(src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    fuse = subprocess.run([str(FUSE), str(src), str(out_dir / "out.pt")], capture_output=True, timeout=120)
    run = subprocess.run([str(RUN), str(src), "--input", "3x16", "--iters", "1"], capture_output=True, timeout=120)
    for tool, result in (("hypatia-fuse", fuse), ("hypatia-run", run)):
        stderr = result.stderr.decode()
        lines = stderr.strip().splitlines()
        assert result.returncode == 1, (tool, result.returncode, stderr)
        assert len(lines) == 1 and lines[0].startswith(f"{tool}: error: ") and lines[0].isprintable(), stderr
        assert text in lines[0], (tool, stderr)
        assert result.stdout == b"", result.stdout
    with pytest.raises(RuntimeError, match=None) as error:
        hypatia_ops.fuse_file(src, out_dir / "out.pt")
    message = str(error.value)
    assert text in message and message.isprintable() and "\n" not in message, message
    assert list(out_dir.iterdir()) == []  # no output, no temporary file
    assert sha(src) == before


def test_record_shorter_than_its_storage(frozen, tmp_path):
    """The known SIGSEGV: a frozen constant's record cut short. The loader gives the storage the
    short buffer and the size its pickle declares; the pass and the kernels read past it."""
    victim = largest_constant(frozen)
    bad = rewrite(frozen, tmp_path / "short.pt", lambda name, data: data[:8] if name == victim else data)
    assert_rejected_everywhere(bad, tmp_path, "storage declares 4096 bytes but the file holds 8")


def test_storage_smaller_than_its_tensor(frozen, tmp_path):
    """constants.pkl declares a storage of 1 element under a [64, 16] weight."""

    def shrink(name, data):
        if not name.endswith("constants.pkl"):
            return data
        import pickletools
        ops = list(pickletools.genops(data))
        # ('storage', FloatStorage, key, location, numel) TUPLE BINPERSID: numel is the int before TUPLE.
        persid = [i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID"]
        numel_op, numel, pos = next((ops[i - 2] for i in persid if ops[i - 2][1] == 64 * 16))
        return data[:pos] + mutate_pt.encode_int(1) + data[pos + mutate_pt.op_length(numel_op.name, data, pos):]

    bad = rewrite(frozen, tmp_path / "small.pt", shrink)
    assert_rejected_everywhere(bad, tmp_path, "tensor of sizes [64, 16], strides [16, 1] and offset 0 needs 4096 bytes"
                                              " of storage, which has 4")


def test_constant_offset_past_its_storage(tmp_path):
    """Found by mutate_pt.py (a constant's offset raised to 65535): torch's loader compares equal-typed
    constants (ConstantPooling) while it compiles the file's code, and read past the storage: SIGSEGV
    in both apps before anything could check the loaded module."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16)).eval()  # equal-typed constants
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.freeze(torch.jit.script(model)).save(str(tmp_path / "frozen.pt"))

    def move_offset(name, data):
        if not name.endswith("constants.pkl"):
            return data
        import pickletools
        ops = list(pickletools.genops(data))
        # _rebuild_tensor_v2's arguments: the storage (BINPERSID), then the offset.
        i = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
        op, offset, pos = next(o for o in ops[i + 1:] if o[0].name in ("BININT", "BININT1", "BININT2"))
        assert offset == 0
        return data[:pos] + mutate_pt.encode_int(65535) + data[pos + mutate_pt.op_length(op.name, data, pos):]

    bad = rewrite(tmp_path / "frozen.pt", tmp_path / "offset.pt", move_offset)
    assert_rejected_everywhere(bad, tmp_path, "and offset 65535 needs")


def test_corrupt_debug_info_is_not_read(tmp_path):
    """Found by mutate_pt.py: a text index in a .debug_pkl (the Python source ranges of the code)
    past the string table. torch parses these lazily and unchecked when the code is printed again:
    Module::save died with SIGSEGV (so does torch.jit.load(f).save(g) in Python). The entry points
    do not read the debug files, so the model loads, fuses and saves as if they were absent."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16)).eval()
    x = torch.randn(3, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(model, x).save(str(tmp_path / "traced.pt"))

    def bad_text_index(name, data):
        if not name.endswith(".debug_pkl"):
            return data
        import pickletools
        ops = list(pickletools.genops(data))
        # A source's text indices: build_intlist's list, the ints between EMPTY_LIST MARK and APPENDS.
        for k in range(len(ops) - 1):
            if ops[k][0].name == "EMPTY_LIST" and ops[k + 1][0].name == "MARK":
                ints = [o for o in ops[k + 2:k + 6] if o[0].name == "BININT1"]
                if len(ints) >= 2:
                    op, _, pos = ints[1]
                    return data[:pos] + mutate_pt.encode_int(200) + data[pos + 2:]
        return data

    src = rewrite(tmp_path / "traced.pt", tmp_path / "debug.pt", bad_text_index)
    assert src.read_bytes() != (tmp_path / "traced.pt").read_bytes()
    before = sha(src)
    result = subprocess.run([str(FUSE), str(src), str(tmp_path / "cli.pt")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    hypatia_ops.fuse_file(src, tmp_path / "py.pt")
    run = subprocess.run([str(RUN), str(src), "--compare", str(tmp_path / "cli.pt"), "--iters", "1"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and float(re.search(r"^rel error: (\S+)$", run.stdout, re.M).group(1)) < 1e-6, run
    with torch.no_grad():
        for out in ("cli.pt", "py.pt"):
            torch.testing.assert_close(torch.jit.load(str(tmp_path / out))(x), model(x))
    assert sha(src) == before


def test_broken_source_is_one_printable_line(frozen, tmp_path):
    """Control and non-UTF-8 bytes in the archive's code reach the compiler's error message:
    escaped, on one line."""
    bad = rewrite(frozen, tmp_path / "code.pt",
                  lambda name, data: data.replace(b"def forward", b"\xff\xfe\x1b[31m\x85forward") if "/code/" in name and
                  name.endswith(".py") else data)
    assert_rejected_everywhere(bad, tmp_path, "expected a valid token but found '\\xff'")


@pytest.mark.parametrize("case", ["empty", "directory", "torch.save", "missing", "member dropped"])
def test_not_a_model(frozen, tmp_path, case):
    src = tmp_path / "in.pt"
    if case == "empty":
        src.write_bytes(b"")
    elif case == "directory":
        src.mkdir()
    elif case == "torch.save":
        torch.save({"weight": torch.randn(3)}, src)
    elif case == "member dropped":
        rewrite(frozen, src, lambda name, data: None if name.endswith("constants.pkl") else data)
    text = {"directory": "is a directory", "missing": "not found"}.get(case, "cannot load")
    if src.is_dir() or not src.exists():
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        for cmd in ([str(FUSE), str(src), str(out_dir / "o.pt")], [str(RUN), str(src), "--input", "3x16"]):
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert result.returncode == 1 and text in result.stderr and len(result.stderr.splitlines()) == 1
        with pytest.raises(RuntimeError, match=text):
            hypatia_ops.fuse_file(src, out_dir / "o.pt")
        assert list(out_dir.iterdir()) == []
    else:
        assert_rejected_everywhere(src, tmp_path, text)


def test_unreadable_file(frozen):
    directory = Path(tempfile.mkdtemp(prefix="hypatia-unreadable-"))  # reachable by every user
    try:
        os.chmod(directory, 0o777)
        src = directory / "in.pt"
        shutil.copy(frozen, src)
        os.chmod(src, 0)
        cmd_prefix = []
        if os.geteuid() == 0:  # root reads anything: drop to nobody
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv")
            cmd_prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        for cmd in ([str(FUSE), str(src), str(directory / "o.pt")], [str(RUN), str(src), "--input", "3x16"]):
            result = subprocess.run(cmd_prefix + cmd, capture_output=True, text=True, timeout=120)
            assert result.returncode == 1 and "cannot load" in result.stderr and "Permission denied" in result.stderr, \
                result.stderr
            assert len(result.stderr.splitlines()) == 1
        assert sorted(p.name for p in directory.iterdir()) == ["in.pt"]
    finally:
        shutil.rmtree(directory)


def test_bad_output_paths(frozen, tmp_path):
    src = tmp_path / "in.pt"
    shutil.copy(frozen, src)
    before = sha(src)
    (tmp_path / "link.pt").symlink_to(src)
    os.link(src, tmp_path / "hard.pt")
    cases = {str(tmp_path): "is a directory", str(src): "is the input file", str(tmp_path / "link.pt"): "is the input",
             str(tmp_path / "hard.pt"): "is the input", str(tmp_path / "no" / "o.pt"): "No such file or directory"}
    for out, text in cases.items():
        result = subprocess.run([str(FUSE), str(src), out], capture_output=True, text=True, timeout=120)
        assert result.returncode in (1, 2) and text in result.stderr and len(result.stderr.splitlines()) == 1, \
            result.stderr
        with pytest.raises(RuntimeError, match=text):
            hypatia_ops.fuse_file(src, out)
    # The report may not overwrite the input or the output either.
    result = subprocess.run([str(FUSE), "--report", str(src), str(src), str(tmp_path / "o.pt")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "is the input file" in result.stderr
    result = subprocess.run([str(FUSE), "--report", str(tmp_path / "o.pt"), str(src), str(tmp_path / "o.pt")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "is the same file as" in result.stderr, result.stderr
    assert sha(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.pt", "in.pt", "link.pt"]


def test_output_written_atomically(frozen, tmp_path):
    """A successful write replaces an existing output whole and keeps a regular file's mode."""
    out = tmp_path / "out.pt"
    out.write_bytes(b"old")
    report = hypatia_ops.fuse_file(frozen, out)
    assert report.mlp == 1
    assert torch.jit.load(str(out)) is not None
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pt"]


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_mutation_smoke(tmp_path):
    """A slice of tests/hostile/mutate_pt.py (the full run's log: docs/reliability/hostile-files.log)."""
    log = tmp_path / "hostile.log"
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "hostile" / "mutate_pt.py"), "--count", "60",
                             "--seed", "2026", "--log", str(log)], capture_output=True, text=True, timeout=900)
    text = log.read_text() if log.exists() else ""
    assert result.returncode == 0, text[-3000:] + result.stderr[-3000:]
    assert "# findings: 0" in text
