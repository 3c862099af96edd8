"""Hypatia Ops: fused Linear+ReLU operators for PyTorch.

Importing this package loads ``libhypatia_ops.so`` into PyTorch, after which the ops are
``torch.ops.hypatia.fused_linear_relu`` and ``torch.ops.hypatia.fused_mlp``. ``fused_linear_relu``
and ``fused_mlp`` here call their ``.default`` overloads, which skips the overload resolution that
calling ``torch.ops.hypatia.<op>`` does on every call.
``fuse``, ``fuse_file`` and ``enable_auto_fusion`` rewrite TorchScript code to call them;
``torch.compile(model, backend="hypatia")`` (registered by this import; ``last_compile_report``
says what it fused) and ``fuse_exported`` (torch.export programs, and through them AOTInductor
packages) rewrite models for PyTorch 2's stack (docs/compile.md).
``cpu_buffer_cache_bytes`` and ``empty_cpu_buffer_cache`` read and empty the cache of large CPU
blocks that ``fused_mlp``'s training forward keeps for its next call.
The library is looked up in ``$HYPATIA_OPS_LIBRARY``, then in this package's ``lib/`` (where
``pip install`` puts it), then in the source tree's ``build/`` directory. Before it is loaded, its
build metadata (``hypatia_ops_build_info.json`` beside it, see :func:`build_info`) is checked
against the installed torch: a library built for another torch release series, CUDA version or
C++ ABI raises ImportError. ``cmake_prefix_path`` is the CMake prefix of the installed C++ package
(``find_package(HypatiaOps)``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "library_path",
    "build_info",
    "cmake_prefix_path",
    "fused_linear_relu",
    "fused_mlp",
    "FusionReport",
    "fuse",
    "fuse_file",
    "enable_auto_fusion",
    "cpu_buffer_cache_bytes",
    "empty_cpu_buffer_cache",
    "last_compile_report",
    "compile_reports",
    "fuse_exported",
]

_LIBRARY_NAME = "libhypatia_ops.so"
_BUILD_INFO_NAME = "hypatia_ops_build_info.json"  # written beside the library (CMakeLists.txt)
_PACKAGE_DIR = Path(__file__).resolve().parent

cmake_prefix_path: str = str(_PACKAGE_DIR)
"""The installed package's CMake prefix, as ``torch.utils.cmake_prefix_path`` is torch's: with both on
``CMAKE_PREFIX_PATH``, ``find_package(HypatiaOps)`` finds ``lib/cmake/HypatiaOps`` here (after
``pip install``; a source tree's ``python/`` has none)."""


def library_path() -> Path:
    """Where libhypatia_ops.so is loaded from."""
    candidates = []
    if os.environ.get("HYPATIA_OPS_LIBRARY"):
        candidates.append(Path(os.environ["HYPATIA_OPS_LIBRARY"]))
    candidates += [_PACKAGE_DIR / "lib" / _LIBRARY_NAME, _PACKAGE_DIR.parents[1] / "build" / _LIBRARY_NAME]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{_LIBRARY_NAME} not found (looked in: {', '.join(map(str, candidates))}); "
        "build it with scripts/build.sh or set HYPATIA_OPS_LIBRARY"
    )


def _read_build_info(library: Path) -> Dict[str, Any]:
    path = library.parent / _BUILD_INFO_NAME
    try:
        info = json.loads(path.read_text())
        _ = info["torch"], info["cuda"], info["cxx11_abi"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ImportError(
            f"hypatia_ops: cannot read {path}, the build metadata of {library} ({error!r}); rebuild the library"
        ) from None
    return info


def _series(version: Optional[str]) -> Optional[str]:
    """'2.11.0+cu130' -> '2.11'; '13.0' -> '13.0'; None stays None."""
    return None if version is None else ".".join(version.split("+")[0].split(".")[:2])


def _check_build_info(info: Dict[str, Any], library: Path) -> None:
    """ImportError unless the library can run with the torch imported: the same release series
    (major.minor, as the package's torch==X.Y.* dependency says), the same CUDA major.minor where the
    library was built against a CUDA torch (a CPU-only build runs with either), the same C++11 ABI."""
    have_cuda, have_abi = torch.version.cuda, bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    if (
        _series(info["torch"]) == _series(torch.__version__)
        and (info["cuda"] is None or _series(info["cuda"]) == _series(have_cuda))
        and bool(info["cxx11_abi"]) == have_abi
    ):
        return

    def describe(torch_version: str, cuda: Optional[str], abi: bool) -> str:
        return f"PyTorch {torch_version} with {f'CUDA {cuda}' if cuda else 'no CUDA'} (C++11 ABI {int(abi)})"

    raise ImportError(
        f"hypatia_ops: {library} was built for {describe(info['torch'], info['cuda'], info['cxx11_abi'])}, "
        f"but you have {describe(torch.__version__, have_cuda, have_abi)}; "
        "rebuild it against this torch (pip install --no-build-isolation .) or install the torch it was built for"
    )


def build_info() -> Dict[str, Any]:
    """What the loaded library was built for and from: ``version``, ``torch`` (the release it was
    built against), ``cuda`` (the CUDA version of that torch build, None for a CPU-only torch),
    ``cuda_kernels`` (whether it has its CUDA kernels), ``cutlass_kernels`` (whether it has the
    CUTLASS GEMM that fuses a hidden layer's input gradient with its ReLU backward, Hopper builds
    only), ``cuda_architectures``, ``cxx11_abi``
    and ``git_commit`` (with ``-dirty`` when the tree had changes; ``unknown`` without git)."""
    return dict(_BUILD_INFO)


_LIBRARY = library_path()
_BUILD_INFO = _read_build_info(_LIBRARY)
_check_build_info(_BUILD_INFO, _LIBRARY)
torch.ops.load_library(str(_LIBRARY))


def fused_linear_relu(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """relu(input @ weight.T + bias) in one op; input is [*, in_features]."""
    return torch.ops.hypatia.fused_linear_relu.default(input, weight, bias)


def fused_mlp(
    input: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[Optional[torch.Tensor]],
    relu_last: bool = False,
) -> torch.Tensor:
    """Linear layers with ReLU between them (and after the last when relu_last), in one op."""
    return torch.ops.hypatia.fused_mlp.default(input, list(weights), list(biases), relu_last)


def cpu_buffer_cache_bytes() -> int:
    """Bytes of freed CPU blocks the library keeps for its next tensors of the same size: those of
    32 MiB or more, such as the hidden activations ``fused_mlp`` saves for its backward, at most
    ``$HYPATIA_CPU_BUFFER_CACHE_MIB`` mebibytes (default 512, read once, when the cache is first used;
    0 keeps none)."""
    return torch.ops.hypatia._cpu_buffer_cache_bytes.default()


def empty_cpu_buffer_cache() -> int:
    """Gives the blocks that ``cpu_buffer_cache_bytes`` counts back to the system, as
    ``torch.cuda.empty_cache`` does on CUDA; returns their bytes."""
    return torch.ops.hypatia._empty_cpu_buffer_cache.default()


@dataclass
class FusionReport:
    """What a fusion did: nodes created, and one line per candidate left alone with the reason."""

    linear_relu: int = 0  # hypatia::fused_linear_relu nodes created
    mlp: int = 0  # hypatia::fused_mlp nodes created
    mlp_layers: int = 0  # linear layers folded into those fused_mlp nodes
    skipped: List[str] = field(default_factory=list)
    fused: List[str] = field(default_factory=list)  # FX front ends: one line per fused node, what it replaced

    @classmethod
    def from_json(cls, text: str) -> "FusionReport":
        return cls(**json.loads(text))


def fuse(
    script_module: torch.jit.ScriptModule,
    freeze: bool = False,
    mlp: bool = True,
    *,
    return_report: bool = False,
) -> Union[torch.jit.ScriptModule, Tuple[torch.jit.ScriptModule, FusionReport]]:
    """A copy of ``script_module`` (scripted or traced) whose Linear+ReLU pairs call
    ``hypatia::fused_linear_relu`` and whose Linear/ReLU chains call ``hypatia::fused_mlp``
    (only pairs when ``mlp`` is False). Submodule calls are inlined into the copy's methods.

    The copy shares the original's parameters and buffers, so it trains them; the original is
    left as it was. With ``freeze``, the copy is put in eval mode and frozen first
    (``torch.jit.freeze``: weights become constants, eval-mode dropout disappears): inference only.

    Returns the fused module, or ``(module, FusionReport)`` when ``return_report`` is set.
    """
    if not isinstance(script_module, torch.jit.ScriptModule):
        raise TypeError(f"fuse: script_module must be a torch.jit.ScriptModule, but got {type(script_module).__name__}")
    fused_c, report_json = torch.ops.hypatia._fuse_module(script_module._c, bool(freeze), bool(mlp))
    fused = torch.jit._recursive.wrap_cpp_module(fused_c)
    if return_report:
        return fused, FusionReport.from_json(report_json)
    return fused


def fuse_file(
    src: Union[str, os.PathLike], dst: Union[str, os.PathLike], freeze: bool = False, mlp: bool = True
) -> FusionReport:
    """Loads the TorchScript file ``src``, fuses it as :func:`fuse` does and saves it to ``dst``.
    Returns the report. Loading ``dst`` later needs this package imported (it registers the ops).

    As ``hypatia-fuse`` does (the same C++ code, ``io/model_file.h``): every tensor of ``src`` is
    checked against its storage before anything reads it, and ``dst`` is written to a temporary
    file in its directory, then renamed, so that it is either the whole model or left as it was.
    Raises ``RuntimeError`` with a one-line message when ``src`` is not a valid TorchScript file,
    ``dst`` is a directory, cannot be written, or is the same file as ``src``."""
    report_json = torch.ops.hypatia._fuse_file(os.fsdecode(src), os.fsdecode(dst), bool(freeze), bool(mlp))
    return FusionReport.from_json(report_json)


def enable_auto_fusion() -> None:
    """From now on, fuse every TorchScript graph that the executor optimises in this process
    (scripted or traced modules and functions, when they run). Opt-in, process-wide, idempotent;
    it cannot be turned off. Graphs with autodiff subgraphs (inputs that require grad) keep
    those subgraphs unfused."""
    torch.ops.hypatia._enable_auto_fusion()


# The FX front ends: the torch.compile backend "hypatia" (registered on import) and fuse_exported.
from .compile_backend import compile_reports, last_compile_report  # noqa: E402
from .export import fuse_exported  # noqa: E402
