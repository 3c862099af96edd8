"""Packaging (issue 36): the build metadata that `import hypatia_ops` checks before it loads the
library, and the wheel that scripts/build_wheel.sh builds from the build tree, installed into a fresh
venv outside the source tree: import, both ops, fusion, hypatia-fuse and hypatia-run from PATH and
through `python -m hypatia_ops`, and a C++ program built out of tree with find_package(HypatiaOps)."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

import hypatia_ops

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HYPATIA_BUILD_DIR", REPO / "build"))
BUILD_INFO = "hypatia_ops_build_info.json"


def series(version):
    return ".".join(version.split("+")[0].split(".")[:2])


def run(args, **kwargs):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)


# --- the build metadata, in the source tree ------------------------------------------------------

def test_build_info_describes_the_loaded_library():
    info = hypatia_ops.build_info()
    assert info == json.loads((hypatia_ops.library_path().parent / BUILD_INFO).read_text())
    assert series(info["torch"]) == series(torch.__version__)
    assert info["cuda"] == torch.version.cuda
    assert info["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI
    assert info["cuda_kernels"] == bool(info["cuda_architectures"])
    assert not info["cuda_kernels"] or info["cuda"] is not None
    assert not info["cutlass_kernels"] or ("90" in info["cuda_architectures"] or "90-real" in info["cuda_architectures"])
    if run(["git", "-C", REPO, "rev-parse", "HEAD"]).returncode != 0:
        pytest.skip("no git checkout here to look the commit up in")
    commit = info["git_commit"].removesuffix("-dirty")
    assert run(["git", "-C", REPO, "cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0, info


def test_build_info_script_writes_the_current_commit(tmp_path):
    """cmake/write_build_info.cmake, which every build runs: the source tree's HEAD, "-dirty" when
    tracked files differ from it, and the configure-time values as given."""
    head = run(["git", "-C", REPO, "rev-parse", "HEAD"])
    if head.returncode != 0:
        pytest.skip("no git checkout here")
    dirty = run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"]).stdout.strip() != ""
    out = tmp_path / "info.json"
    result = run(["cmake", f"-DOUTPUT={out}", f"-DGIT_EXECUTABLE={shutil.which('git')}", f"-DSOURCE_DIR={REPO}",
                  "-DVERSION=1.2.3", "-DTORCH=2.11.0", "-DCUDA=null", "-DCUDA_KERNELS=false",
                  "-DCUTLASS_KERNELS=false", "-DCUDA_ARCHITECTURES=", "-DCXX11_ABI=true", "-P", REPO / "cmake" / "write_build_info.cmake"])
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == {
        "version": "1.2.3", "torch": "2.11.0", "cuda": None, "cuda_kernels": False, "cutlass_kernels": False,
        "cuda_architectures": [], "cxx11_abi": True, "git_commit": head.stdout.strip() + ("-dirty" if dirty else "")}


def import_with_build_info(tmp_path, info):
    """`import hypatia_ops` in a subprocess whose library is this build's, seen through a link in
    `tmp_path` beside which lies `info` as its build metadata (none when info is None)."""
    (tmp_path / "libhypatia_ops.so").symlink_to(hypatia_ops.library_path().resolve())
    if info is not None:
        (tmp_path / BUILD_INFO).write_text(json.dumps(info))
    env = dict(os.environ, HYPATIA_OPS_LIBRARY=str(tmp_path / "libhypatia_ops.so"),
               PYTHONPATH=str(REPO / "python"))
    return run([sys.executable, "-c", "import hypatia_ops"], env=env, cwd=tmp_path)


@pytest.mark.parametrize("field, value", [("torch", "2.10.0"), ("cuda", "12.8"), ("cxx11_abi", "flip")])
def test_mismatched_build_info_raises_import_error(tmp_path, field, value):
    info = hypatia_ops.build_info()
    info[field] = (not info[field]) if value == "flip" else value
    result = import_with_build_info(tmp_path, info)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: hypatia_ops: "), result.stderr
    assert f"was built for PyTorch {info['torch']} with " in last and f"you have PyTorch {torch.__version__} " in last
    if field == "cuda":
        assert "CUDA 12.8" in last
    if field == "cxx11_abi":
        assert f"(C++11 ABI {int(info['cxx11_abi'])})" in last


def test_matching_build_info_imports(tmp_path):
    result = import_with_build_info(tmp_path, hypatia_ops.build_info())
    assert result.returncode == 0, result.stderr


def test_cpu_only_build_info_imports_with_this_torch(tmp_path):
    """A library built against a CPU-only torch (cuda null) links no CUDA library: a CUDA torch of
    its series runs it too."""
    info = dict(hypatia_ops.build_info(), cuda=None, cuda_kernels=False, cutlass_kernels=False, cuda_architectures=[])
    result = import_with_build_info(tmp_path, info)
    assert result.returncode == 0, result.stderr


def test_missing_build_info_raises_import_error(tmp_path):
    result = import_with_build_info(tmp_path, None)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and last.startswith("ImportError: hypatia_ops: cannot read "), result.stderr


# --- the wheel, in a fresh venv ------------------------------------------------------------------

def find_wheel():
    wheels = sorted((BUILD / "wheelhouse").glob("hypatia_ops-*.whl"))
    return wheels[-1] if len(wheels) == 1 else None


requires_wheel = pytest.mark.skipif(
    find_wheel() is None, reason=f"no wheel in {BUILD / 'wheelhouse'} (scripts/build_wheel.sh builds it)")


class Venv:
    """A fresh venv outside the source tree with the wheel installed. Instead of a second download
    of torch, its site-packages links torch and the nvidia wheels of this Python's torch (where the
    installed package's RUNPATHs look for them) and a .pth file adds that site-packages for the rest
    (torch's dependencies, its dist-info for pip's requirement check)."""

    def __init__(self, root: Path, wheel: Path):
        self.root, self.work = root, root / "work"
        self.work.mkdir()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True)
        self.python = root / "venv" / "bin" / "python"
        self.site = Path(run([self.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
                         .stdout.strip())
        torch_site = Path(torch.__file__).resolve().parents[1]
        for name in ("torch", "nvidia"):
            if (torch_site / name).is_dir():
                (self.site / name).symlink_to(torch_site / name)
        (self.site / "torch_site.pth").write_text(f"{torch_site}\n")
        # Nothing of the source tree or the build: the installed package alone.
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("HYPATIA_OPS_LIBRARY", "HYPATIA_BUILD_DIR", "PYTHONPATH", "LD_LIBRARY_PATH")}
        self.env["PATH"] = f"{root / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"
        install = run([sys.executable, "-m", "pip", "--python", self.python, "install", "--no-index",
                       "--no-cache-dir", wheel], env=self.env)
        assert install.returncode == 0, install.stdout + install.stderr

    def run(self, args, **kwargs):
        return run(args, env=self.env, cwd=self.work, **kwargs)

    def python_json(self, code: str):
        """Runs `code` in the venv's Python, which prints one JSON value last; returns it."""
        result = self.run([self.python, "-c", textwrap.dedent(code)])
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    if find_wheel() is None:
        pytest.skip("no wheel")
    return Venv(tmp_path_factory.mktemp("packaging"), find_wheel())


@pytest.fixture(scope="module")
def models(venv):
    """A scripted Linear-ReLU-Linear-ReLU-Linear model saved in the venv's work directory, its
    eager output on run_model's input (tests/consumer/run_model.cpp), and that input's shape."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    torch.jit.script(model).save(str(venv.work / "model.pt"))
    rows, features = 5, 12
    x = torch.linspace(-1, 1, rows * features).reshape(rows, features)
    with torch.no_grad():
        return venv.work / "model.pt", model(x), (rows, features)


@requires_wheel
def test_wheel_requires_the_torch_series_built_against():
    with zipfile.ZipFile(find_wheel()) as wheel:
        metadata = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"Requires-Dist: torch=={series(torch.__version__)}.*" in metadata.splitlines()


@requires_wheel
def test_wheel_imports_and_runs_the_ops_outside_the_source_tree(venv):
    result = venv.python_json("""
        import json, torch, torch.nn.functional as F, hypatia_ops
        x, w1, b1, w2 = (torch.randn(*s, dtype=torch.float64) for s in ((9, 7), (5, 7), (5,), (4, 5)))
        h = hypatia_ops.fused_linear_relu(x, w1, b1)
        y = torch.ops.hypatia.fused_mlp(x, [w1, w2], [b1, None])
        ref_h = F.relu(F.linear(x, w1, b1))
        ref_y = F.linear(ref_h, w2)
        rel = lambda out, ref: ((out.double().cpu() - ref).norm() / ref.norm()).item()
        cuda_errors = None
        if torch.cuda.is_available():  # the CUDA kernels and libraries, through the wheel's RPATHs
            xc, w1c, b1c, w2c = (t.float().cuda() for t in (x, w1, b1, w2))
            cuda_errors = [rel(hypatia_ops.fused_linear_relu(xc, w1c, b1c), ref_h),
                           rel(hypatia_ops.fused_mlp(xc, [w1c, w2c], [b1c, None]), ref_y)]
        model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4)))
        fused, report = hypatia_ops.fuse(model, return_report=True)
        x32 = x.float()
        print(json.dumps({
            "library": str(hypatia_ops.library_path()), "build_info": hypatia_ops.build_info(),
            "cmake_prefix_path": hypatia_ops.cmake_prefix_path,
            "linear_relu_error": rel(h, ref_h), "mlp_error": rel(y, ref_y), "cuda_errors": cuda_errors,
            "fused_mlp_nodes": report.mlp, "fused_equal": torch.allclose(fused(x32), model(x32), atol=1e-5, rtol=1e-5),
        }))
    """)
    package = venv.site / "hypatia_ops"
    assert Path(result["library"]) == package / "lib" / "libhypatia_ops.so"
    assert Path(result["cmake_prefix_path"]) == package
    assert result["build_info"] == hypatia_ops.build_info()  # the wheel holds this build tree's library
    assert result["linear_relu_error"] < 1e-12 and result["mlp_error"] < 1e-12, result
    assert (result["cuda_errors"] is None) == (not torch.cuda.is_available())
    assert result["cuda_errors"] is None or max(result["cuda_errors"]) < 1e-5, result
    assert result["fused_mlp_nodes"] == 1 and result["fused_equal"], result


@requires_wheel
@pytest.mark.parametrize("launcher", ["path", "module"])
def test_wheel_clis_fuse_and_run_a_model(venv, models, launcher, tmp_path):
    """hypatia-fuse and hypatia-run as console scripts on PATH, or as `python -m hypatia_ops fuse|run`."""
    model, expected, _ = models
    if launcher == "path":
        fuse_tool, run_tool = ([shutil.which(name, path=venv.env["PATH"])] for name in ("hypatia-fuse", "hypatia-run"))
        assert fuse_tool[0] == str(venv.root / "venv" / "bin" / "hypatia-fuse")
    else:
        fuse_tool, run_tool = ([venv.python, "-m", "hypatia_ops", tool] for tool in ("fuse", "run"))
    fused = tmp_path / "fused.pt"
    result = venv.run([*fuse_tool, "--report", tmp_path / "report.json", model, fused])
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "report.json").read_text())["mlp"] == 1
    result = venv.run([*run_tool, model, "--compare", fused, "--iters", "2", "--warmup", "1"])
    assert result.returncode == 0, result.stderr
    assert "fused_mlp=1" in result.stdout, result.stdout
    assert float(re.search(r"^rel error: (\S+)$", result.stdout, re.M).group(1)) < 1e-5, result.stdout
    result = venv.run([*run_tool, tmp_path / "missing.pt"])
    assert result.returncode == 1 and result.stderr.startswith("hypatia-run: error: "), result.stderr


@requires_wheel
def test_module_without_a_tool_prints_usage(venv):
    result = venv.run([venv.python, "-m", "hypatia_ops"])
    assert result.returncode == 2 and result.stderr.strip() == "usage: python -m hypatia_ops fuse|run ARGS..."


@requires_wheel
def test_wheel_find_package_consumer_builds_and_runs(venv, models, tmp_path):
    """tests/consumer built against the installed package with -Wl,--as-needed: the C++ API, and a
    program that only loads a fused model, whose ops stay registered through HypatiaOps::hypatia_ops
    alone (the same program linked to the bare library loses them)."""
    model, expected, (rows, features) = models
    fused = venv.work / "consumer_fused.pt"
    assert venv.run(["hypatia-fuse", model, fused]).returncode == 0
    prefixes = venv.python_json("""
        import json, torch, hypatia_ops
        print(json.dumps([hypatia_ops.cmake_prefix_path, torch.utils.cmake_prefix_path]))
    """)
    build = tmp_path / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    result = venv.run(["cmake", "-S", REPO / "tests" / "consumer", "-B", build, *generator,
                       f"-DCMAKE_PREFIX_PATH={';'.join(prefixes)}", "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    result = venv.run(["cmake", "--build", build])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    result = venv.run([build / "call_ops"])
    assert result.returncode == 0, result.stdout + result.stderr

    result = venv.run([build / "run_model", fused, rows, features])
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["shape"] == f"{rows} x {expected.shape[1]}"
    assert abs(float(lines["sum"]) - expected.double().sum().item()) < 1e-4

    result = venv.run([build / "run_model_unkept", fused, rows, features])
    assert result.returncode == 1 and "hypatia::fused_mlp" in result.stderr, result.stderr


@requires_wheel
def test_wheel_with_mismatched_build_info_raises_import_error(venv, tmp_path):
    """The installed package copied elsewhere with its metadata edited to another torch."""
    copy = tmp_path / "hypatia_ops"
    shutil.copytree(venv.site / "hypatia_ops", copy, ignore=shutil.ignore_patterns("include", "cmake", "bin"))
    info_path = copy / "lib" / BUILD_INFO
    info = json.loads(info_path.read_text())
    info["torch"] = "2.99.0"
    info_path.write_text(json.dumps(info))
    result = run([venv.python, "-c", "import hypatia_ops"], env=dict(venv.env, PYTHONPATH=str(tmp_path)),
                 cwd=venv.work)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and last.startswith("ImportError: hypatia_ops: "), result.stderr
    assert str(copy / "lib" / "libhypatia_ops.so") in last
    assert "built for PyTorch 2.99.0 with " in last and f"you have PyTorch {torch.__version__} " in last
