"""Hypatia Ops: fused Linear+ReLU operators for PyTorch.

Importing this package loads ``libhypatia_ops.so`` into PyTorch, after which the ops are
``torch.ops.hypatia.fused_linear_relu`` and ``torch.ops.hypatia.fused_mlp``. ``fused_linear_relu``
and ``fused_mlp`` here call their ``.default`` overloads, which skips the overload resolution that
calling ``torch.ops.hypatia.<op>`` does on every call.
``fuse``, ``fuse_file`` and ``enable_auto_fusion`` rewrite TorchScript code to call them.
``cpu_buffer_cache_bytes`` and ``empty_cpu_buffer_cache`` read and empty the cache of large CPU
blocks that ``fused_mlp``'s training forward keeps for its next call.
The library is looked up in ``$HYPATIA_OPS_LIBRARY``, then beside this package, then in the
source tree's ``build/`` directory.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "library_path",
    "fused_linear_relu",
    "fused_mlp",
    "FusionReport",
    "fuse",
    "fuse_file",
    "enable_auto_fusion",
    "cpu_buffer_cache_bytes",
    "empty_cpu_buffer_cache",
]

_LIBRARY_NAME = "libhypatia_ops.so"


def library_path() -> Path:
    """Where libhypatia_ops.so is loaded from."""
    candidates = []
    if os.environ.get("HYPATIA_OPS_LIBRARY"):
        candidates.append(Path(os.environ["HYPATIA_OPS_LIBRARY"]))
    here = Path(__file__).resolve().parent
    candidates += [here / _LIBRARY_NAME, here.parents[1] / "build" / _LIBRARY_NAME]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{_LIBRARY_NAME} not found (looked in: {', '.join(map(str, candidates))}); "
        "build it with scripts/build.sh or set HYPATIA_OPS_LIBRARY"
    )


torch.ops.load_library(str(library_path()))


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
