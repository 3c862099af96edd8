#!/usr/bin/env python3
"""Hostile model files (issue 37 item 3): mutated copies of real saved TorchScript models, run
through hypatia-fuse, hypatia-run and hypatia_ops.fuse_file, each checked against these rules:

- the exit is clean: 0, or the documented error codes (1, 2; fuse_file a RuntimeError), never a
  signal, a hang or a sanitizer report;
- a failure prints exactly one printable line on stderr (for fuse_file: the exception's message);
- no partial output: after a failure neither the output nor a temporary file is left, after a
  success the output loads as TorchScript;
- the input's bytes are unchanged.

Mutations (seeded, one per file, on a random base model): byte flips inside one zip member (the
zip rewritten with valid CRCs, so that the loader parses the bytes) or in the raw file, integers
of a pickle replaced (sizes, strides, offsets, storage sizes), a member truncated, dropped, renamed
or replaced by junk of another length, the file truncated; and the fixed cases: a torch.save
pickle (zip and legacy), an empty file, a directory, a missing and an unreadable file. Bad output
paths (a directory, the input itself and a link to it, a missing or unwritable directory) are
checked on a valid model.

    python tests/hostile/mutate_pt.py --count 1000 [--seed 0] [--build build] [--log FILE] [--jobs 2]

Exit status 0 when nothing broke a rule; the log (stdout, or --log) has one line per file and a
summary at its end. With a sanitizer build (--build build-asan), the Python worker runs with the
sanitizer runtime preloaded (libasan and libstdc++ from `gcc -print-file-name`).
"""
import argparse
import collections
import hashlib
import io
import json
import os
import pickletools
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

ROOT = Path(__file__).resolve().parents[2]
SANITIZER_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer", "runtime error:")
TIMEOUT_S = 120
INTERESTING_INTS = [0, 1, -1, 2, 7, 255, 256, 65535, 2**31 - 1, -2**31, 2**32, 2**62, -2**63, 10**12]


# --- base models --------------------------------------------------------------------------------

class ListWeights(torch.nn.Module):
    """Weights in a list attribute (not parameters), and a call to hypatia::fused_mlp."""

    weights: List[torch.Tensor]
    biases: List[Optional[torch.Tensor]]

    def __init__(self, model):
        super().__init__()
        linears = [m for m in model if isinstance(m, torch.nn.Linear)]
        self.weights = [m.weight.detach() for m in linears]
        self.biases = [m.bias.detach() for m in linears]

    def forward(self, x):
        return torch.ops.hypatia.fused_mlp(x, self.weights, self.biases, False)


def make_bases(out: Path) -> Dict[str, Tuple[Path, List[str]]]:
    """Real saved models: the reference models scripted, traced and frozen (models/export.py), a
    model that holds its weights in a list attribute and calls hypatia::fused_mlp, and a file
    written by fuse_file. Returns {name: (path, hypatia-run input flags)}."""
    sys.path.insert(0, str(ROOT / "models"))
    sys.path.insert(0, str(ROOT / "python"))
    import export  # noqa: E402
    import hypatia_ops  # noqa: E402
    from reference_models import MODELS, build  # noqa: E402

    bases = {}
    files = export.export(out, ["narrow_mlp", "transformer_ffn"], ["scripted", "traced", "frozen"])
    files.update(export.export(out, ["vgg_head"], ["frozen"]))
    for key, path in files.items():
        bases[key] = (path, ["--input", f"3x{MODELS[key.rsplit('_', 1)[0]].in_features}"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(ListWeights(build("narrow_mlp"))).save(str(out / "list_weights.pt"))
    bases["list_weights"] = (out / "list_weights.pt", ["--input", "3x63"])
    hypatia_ops.fuse_file(files["vgg_head_frozen"], out / "vgg_head_fused.pt")
    bases["vgg_head_fused"] = (out / "vgg_head_fused.pt", ["--input", f"3x{MODELS['vgg_head'].in_features}"])
    return bases


# --- mutations ----------------------------------------------------------------------------------

def read_members(path: Path) -> List[Tuple[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        return [(info.filename, z.read(info.filename)) for info in z.infolist()]


def write_members(members: List[Tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name, data)
    return buffer.getvalue()


def pick_member(rng: random.Random, members, prefer=None) -> int:
    """Index of a member, pickles and storages more often than the rest."""
    weights = []
    for name, data in members:
        w = 1.0
        if name.endswith(".pkl"):
            w = 4.0
        elif "/constants/" in name or "/data/" in name:
            w = 3.0
        elif "/code/" in name:
            w = 2.0
        if prefer and not prefer(name):
            w = 0.0
        weights.append(w)
    if not any(weights):
        weights = [1.0] * len(members)
    return rng.choices(range(len(members)), weights)[0]


def int_ops(data: bytes) -> List[Tuple[int, str, int]]:
    """(position, opcode name, argument) of every integer pushed by the pickle `data`."""
    found = []
    try:
        for op, arg, pos in pickletools.genops(data):
            if op.name in ("BININT", "BININT1", "BININT2", "LONG1") and isinstance(arg, int):
                found.append((pos, op.name, arg))
    except Exception:
        pass
    return found


def encode_int(value: int) -> bytes:
    """The shortest of BININT1, BININT2, BININT or LONG1 that pushes `value`."""
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + value.to_bytes(2, "little")
    if -2**31 <= value < 2**31:
        return b"J" + value.to_bytes(4, "little", signed=True)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def op_length(name: str, data: bytes, pos: int) -> int:
    return {"BININT": 5, "BININT1": 2, "BININT2": 3}.get(name) or 2 + data[pos + 1]


def mutate(rng: random.Random, base: bytes) -> Tuple[str, bytes]:
    """One random mutation of the archive `base`: (description, bytes)."""
    members = read_members_bytes(base)
    kind = rng.choices(["flip", "pickle-int", "truncate-member", "drop", "rename", "junk", "raw-flip", "raw-truncate"],
                       [30, 30, 10, 6, 6, 8, 6, 4])[0]
    if kind == "raw-flip":
        data = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= rng.randint(1, 255)
        return kind, bytes(data)
    if kind == "raw-truncate":
        n = rng.randrange(len(base))
        return f"{kind} at {n}", base[:n]
    if kind == "pickle-int":
        i = pick_member(rng, members, lambda name: name.endswith(".pkl") and not name.endswith(".debug_pkl"))
        name, data = members[i]
        ints = int_ops(data)
        if ints:
            pos, op, old = rng.choice(ints)
            new = rng.choice(INTERESTING_INTS + [old + rng.choice([-2, -1, 1, 2, 16]), old * rng.choice([2, 16])])
            data = data[:pos] + encode_int(new) + data[pos + op_length(op, data, pos):]
            members[i] = (name, data)
            return f"{kind} {short(name)}@{pos} {old}->{new}", write_members(members)
        kind = "flip"  # a pickle without integers
    i = pick_member(rng, members)
    name, data = members[i]
    if kind == "flip":
        data = bytearray(data)
        flips = rng.randint(1, 8)
        for _ in range(flips if data else 0):
            data[rng.randrange(len(data))] ^= rng.randint(1, 255)
        members[i] = (name, bytes(data))
        return f"{kind} {short(name)} x{flips}", write_members(members)
    if kind == "truncate-member":
        n = rng.randrange(len(data)) if data else 0
        members[i] = (name, data[:n])
        return f"{kind} {short(name)} {len(data)}->{n}", write_members(members)
    if kind == "drop":
        del members[i]
        return f"{kind} {short(name)}", write_members(members)
    if kind == "rename":
        new_name = name + rng.choice(["x", ".bak", "/", ""]) if rng.random() < 0.5 else name.replace("/", "/_", 1)
        if new_name == name:
            new_name = name + "~"
        members[i] = (new_name, data)
        return f"{kind} {short(name)}->{short(new_name)}", write_members(members)
    length = len(data)
    while length == len(data):
        length = rng.choice([0, 1, 7, rng.randrange(1, 4 * len(data) + 8)])
    members[i] = (name, bytes(rng.getrandbits(8) for _ in range(length)))
    return f"junk {short(name)} {len(data)}->{length}", write_members(members)


def read_members_bytes(data: bytes) -> List[Tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(info.filename, z.read(info.filename)) for info in z.infolist()]


def short(name: str) -> str:
    return name.split("/", 1)[1] if "/" in name else name


# --- running the entry points -------------------------------------------------------------------

class Worker:
    """A Python process that runs hypatia_ops.fuse_file and loads outputs, one request a line; it
    is started again after a crash, which is reported for the request that caused it."""

    def __init__(self, env: Dict[str, str]):
        self.env = env
        self.proc: Optional[subprocess.Popen] = None

    def request(self, **req) -> Dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
        timer = threading.Timer(TIMEOUT_S, self.proc.kill)
        timer.start()
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        finally:
            timer.cancel()
        if not line:
            self.proc.wait()
            stderr = self.proc.stderr.read()
            self.proc = None
            return {"crash": f"worker died (exit {self.proc_rc(stderr)}): {tail(stderr)}"}
        return json.loads(line)

    @staticmethod
    def proc_rc(stderr: str) -> str:
        return "sanitizer report" if any(m in stderr for m in SANITIZER_MARKS) else "signal or exit"

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


def worker_main() -> int:
    """--worker: requests on stdin, results on stdout."""
    sys.path.insert(0, str(ROOT / "python"))
    warnings.simplefilter("ignore")
    import hypatia_ops
    for line in sys.stdin:
        req = json.loads(line)
        result = {}
        try:
            if req["op"] == "fuse_file":
                hypatia_ops.fuse_file(req["src"], req["dst"])
                result["ok"] = True
            else:
                torch.jit.load(req["path"])
                result["ok"] = True
        except Exception as e:  # noqa: BLE001 - every failure is a result here
            result = {"ok": False, "type": type(e).__name__, "error": str(e)}
        print(json.dumps(result), flush=True)
    return 0


def tail(text: str, n: int = 300) -> str:
    text = " | ".join(line for line in text.strip().splitlines()[-3:])
    return text[-n:]


def run_cli(cmd: List[str], env, as_nobody: bool = False) -> Tuple[Optional[int], str, str]:
    if as_nobody:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return None, "", "timeout"
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def leftovers(directory: Path, keep: Tuple[str, ...]) -> List[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


class Checker:
    def __init__(self, build: Path, env: Dict[str, str]):
        self.fuse = str(build / "hypatia-fuse")
        self.run = str(build / "hypatia-run")
        self.env = env
        self.local = threading.local()
        self.workers: List[Worker] = []
        self.lock = threading.Lock()

    def worker(self) -> Worker:
        if not hasattr(self.local, "worker"):
            self.local.worker = Worker(self.env)
            with self.lock:
                self.workers.append(self.local.worker)
        return self.local.worker

    def cli_rules(self, tool: str, rc, stderr: str, findings: List[str]) -> str:
        if rc is None:
            findings.append(f"{tool}: hang (over {TIMEOUT_S} s)")
            return "hang"
        if any(m in stderr for m in SANITIZER_MARKS):
            findings.append(f"{tool}: sanitizer report: {tail(stderr)}")
        if rc < 0 or rc not in (0, 1, 2):
            findings.append(f"{tool}: exit {rc}: {tail(stderr)}")
            return f"exit {rc}"
        if rc != 0:
            lines = stderr.strip("\n").split("\n")
            if len(lines) != 1 or not lines[0].startswith(f"{tool}: error: ") or not lines[0].isprintable():
                findings.append(f"{tool}: stderr is not one printable error line: {stderr[:400]!r}")
            return f"{rc}"
        if stderr.strip():
            findings.append(f"{tool}: succeeded with stderr {stderr[:400]!r}")
        return "0"

    def output_rules(self, tool: str, ok: bool, out_dir: Path, out: Path, findings: List[str]) -> None:
        left = leftovers(out_dir, (out.name,) if ok else ())
        if left:
            findings.append(f"{tool}: left {left} after {'success' if ok else 'failure'}")
        if ok:
            if not out.is_file():
                findings.append(f"{tool}: succeeded without writing {out.name}")
            else:
                loaded = self.worker().request(op="load", path=str(out))
                if not loaded.get("ok"):
                    findings.append(f"{tool}: its output does not load: {loaded}")

    def check(self, src: Path, run_flags: List[str], work: Path, as_nobody: bool = False) -> Tuple[str, List[str]]:
        """Runs the three entry points on `src`; returns (outcomes and hypatia-fuse's error line, findings)."""
        findings: List[str] = []
        message = ""
        before = digest(src)
        outcome = []
        for tool in ("hypatia-fuse", "fuse_file"):
            out_dir = work / tool
            shutil.rmtree(out_dir, ignore_errors=True)
            out_dir.mkdir(parents=True)
            if as_nobody:
                os.chmod(work, 0o777)
                os.chmod(out_dir, 0o777)
            out = out_dir / "out.pt"
            if tool == "hypatia-fuse":
                rc, _, stderr = run_cli([self.fuse, str(src), str(out)], self.env, as_nobody)
                outcome.append("fuse=" + self.cli_rules(tool, rc, stderr, findings))
                message = stderr.strip().split("\n")[0][len("hypatia-fuse: error: "):].replace(str(src), "IN")[:160] if rc else ""
                ok = rc == 0
            else:
                if as_nobody:  # the worker runs as this user; the case is the CLIs'
                    continue
                result = self.worker().request(op="fuse_file", src=str(src), dst=str(out))
                if "crash" in result:
                    findings.append(f"fuse_file: {result['crash']}")
                    outcome.append("fuse_file=crash")
                    continue
                ok = result["ok"]
                if not ok:
                    error = result["error"]
                    if result["type"] != "RuntimeError" or "\n" in error.strip() or not error.isprintable():
                        findings.append(f"fuse_file: {result['type']} not one printable line: {error[:400]!r}")
                outcome.append("fuse_file=" + ("0" if ok else "err"))
            self.output_rules(tool, ok, out_dir, out, findings)
        rc, _, stderr = run_cli([self.run, str(src), *run_flags, "--iters", "1", "--warmup", "1", "--threads", "1"],
                                self.env, as_nobody)
        outcome.append("run=" + self.cli_rules("hypatia-run", rc, stderr, findings))
        if digest(src) != before:
            findings.append("the input was modified")
        return " ".join(outcome) + (f" | {message}" if message else ""), findings

    def close(self):
        for worker in self.workers:
            worker.close()


def digest(path: Path) -> str:
    if not path.exists():
        return "missing"
    if path.is_dir():
        return "directory"
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the cases ----------------------------------------------------------------------------------

def fixed_cases(bases, work: Path) -> List[Tuple[str, Path, List[str], bool]]:
    """(description, path, run flags, as nobody) of the cases that are not random mutations."""
    d = work / "fixed"
    d.mkdir(parents=True, exist_ok=True)
    flags = ["--input", "3x63"]
    torch.save({"w": torch.randn(4, 4)}, d / "torch_save_zip.pt")
    torch.save({"w": torch.randn(4, 4)}, d / "torch_save_legacy.pt", _use_new_zipfile_serialization=False)
    (d / "empty.pt").write_bytes(b"")
    (d / "a_directory.pt").mkdir(exist_ok=True)
    (d / "not_a_zip.pt").write_bytes(b"\x80\x02hypatia\xff\xfe\n\x1b[31m" * 50)
    unreadable = d / "unreadable.pt"
    shutil.copy(bases["narrow_mlp_frozen"][0], unreadable)
    os.chmod(unreadable, 0)
    return [("torch.save (zip)", d / "torch_save_zip.pt", flags, False),
            ("torch.save (legacy pickle)", d / "torch_save_legacy.pt", flags, False),
            ("empty file", d / "empty.pt", flags, False),
            ("a directory", d / "a_directory.pt", flags, False),
            ("not a zip, control bytes", d / "not_a_zip.pt", flags, False),
            ("missing file", d / "missing.pt", flags, False),
            ("unreadable file", unreadable, flags, os.geteuid() == 0 and shutil.which("setpriv") is not None)]


def output_path_cases(checker: Checker, bases, work: Path) -> List[Tuple[str, List[str]]]:
    """Bad output paths on a valid model, for hypatia-fuse and fuse_file: (description, findings)."""
    src = bases["narrow_mlp_scripted"][0]
    d = work / "outputs"
    d.mkdir(parents=True, exist_ok=True)
    link = d / "link.pt"
    if not link.exists():
        os.symlink(src, link)
    locked = d / "locked"
    locked.mkdir(exist_ok=True)
    os.chmod(locked, 0o555)
    nobody = os.geteuid() == 0 and shutil.which("setpriv") is not None
    cases = [("output is a directory", str(d), False), ("output is the input", str(src), False),
             ("output is a symlink to the input", str(link), False),
             ("output in a missing directory", str(d / "missing" / "out.pt"), False),
             ("output in an unwritable directory", str(locked / "out.pt"), nobody)]
    results = []
    for description, out, as_nobody in cases:
        findings = []
        before = digest(src)
        if as_nobody:
            os.chmod(work, 0o777)
            os.chmod(d, 0o777)
        rc, _, stderr = run_cli([checker.fuse, str(src), out], checker.env, as_nobody)
        if checker.cli_rules("hypatia-fuse", rc, stderr, findings) in ("0", "hang"):
            findings.append("hypatia-fuse accepted it")
        if not as_nobody:
            result = checker.worker().request(op="fuse_file", src=str(src), dst=out)
            if result.get("ok") or "crash" in result:
                findings.append(f"fuse_file: {result}")
        if digest(src) != before:
            findings.append("the input was modified")
        left = leftovers(locked, ())
        if left:
            findings.append(f"left {left}")
        results.append((description, findings))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="mutated files (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build", type=Path, default=Path(os.environ.get("HYPATIA_BUILD_DIR", ROOT / "build")))
    parser.add_argument("--log", type=Path, help="write the log here (default: stdout)")
    parser.add_argument("--jobs", type=int, default=2, help="files checked at once (default 2)")
    parser.add_argument("--keep", type=Path, help="copy every file that broke a rule into this directory")
    parser.add_argument("--only", type=lambda text: {int(i) for i in text.split(",")},
                        help="check only these files of the plan (comma-separated indices), e.g. to reproduce a finding")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main()

    build = args.build.resolve()
    env = dict(os.environ, HYPATIA_OPS_LIBRARY=str(build / "libhypatia_ops.so"), PYTHONWARNINGS="ignore")
    asan = subprocess.run(["ldd", str(build / "hypatia-fuse")], capture_output=True, text=True).stdout
    if "libasan" in asan:
        # libstdc++ too: Python does not link it, and ASan's __cxa_throw interceptor needs it loaded
        # when the runtime starts.
        env["LD_PRELOAD"] = " ".join(
            subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
            for lib in ("libasan.so", "libstdc++.so"))
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    log_file = open(args.log, "w") if args.log else sys.stdout
    lock = threading.Lock()

    def log(line: str) -> None:
        with lock:
            print(line, file=log_file, flush=True)

    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="hostile-"))
    os.chmod(work, 0o777)
    log(f"# hostile files: {args.count} mutated + fixed cases, seed {args.seed}, build {build}")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    log(f"# commit {commit.strip() or 'unknown'}, torch {torch.__version__}, "
        f"{'sanitizer build' if 'libasan' in asan else 'plain build'}, jobs {args.jobs}")
    checker = Checker(build, env)
    findings_total: List[str] = []
    tally = collections.Counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bases = make_bases(work / "bases")
        names = sorted(bases)
        base_bytes = {name: bases[name][0].read_bytes() for name in names}
        log(f"# bases: {', '.join(names)}")

        def record(index: str, description: str, outcome: str, findings: List[str], path: Optional[Path]) -> None:
            with lock:
                tally[outcome.split(" | ")[0]] += 1
                for f in findings:
                    findings_total.append(f"{index} {description}: {f}")
                if findings and args.keep and path is not None and path.is_file():
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, args.keep / f"{index.strip('#')}.pt")
            log(f"{index} {description} :: {outcome}" + "".join(f"\n    FINDING {f}" for f in findings))

        if args.only is None:
            for k, (description, path, flags, as_nobody) in enumerate(fixed_cases(bases, work)):
                outcome, findings = checker.check(path, flags, work / f"fixed-{k}", as_nobody)
                record(f"#F{k}", description, outcome, findings, None)
            for description, findings in output_path_cases(checker, bases, work):
                record("#O", description, "rejected" if not findings else "broke a rule", findings, None)

        rng = random.Random(args.seed)
        plan = []
        for i in range(args.count):
            name = rng.choice(names)
            description, data = mutate(rng, base_bytes[name])
            if args.only is None or i in args.only:
                plan.append((i, name, description, data))

        def one(item):
            i, name, description, data = item
            case_dir = work / f"case-{i}"
            case_dir.mkdir(parents=True)
            src = case_dir / "in.pt"
            src.write_bytes(data)
            outcome, findings = checker.check(src, bases[name][1], case_dir)
            record(f"#{i:04d}", f"{name}: {description}", outcome, findings, src)
            shutil.rmtree(case_dir, ignore_errors=True)

        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(one, plan))
    finally:
        checker.close()
        shutil.rmtree(work, ignore_errors=True)
    log("")
    log(f"# summary: {args.count} mutated files (seed {args.seed}) and the fixed cases, "
        f"{time.time() - started:.0f} s")
    for outcome, n in sorted(tally.items(), key=lambda kv: -kv[1]):
        log(f"#   {n:5d}  {outcome}")
    log(f"# findings: {len(findings_total)}")
    for f in findings_total:
        log(f"#   {f}")
    return 1 if findings_total else 0


if __name__ == "__main__":
    sys.exit(main())
