"""Hypatia Ops: fused Linear+ReLU operators for PyTorch.

Importing this package loads ``libhypatia_ops.so`` into PyTorch, after which the ops are
``torch.ops.hypatia.fused_linear_relu`` and ``torch.ops.hypatia.fused_mlp``.
The library is looked up in ``$HYPATIA_OPS_LIBRARY``, then beside this package, then in the
source tree's ``build/`` directory.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import torch

__all__ = ["library_path", "fused_linear_relu", "fused_mlp"]

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
    return torch.ops.hypatia.fused_linear_relu(input, weight, bias)


def fused_mlp(
    input: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[Optional[torch.Tensor]],
    relu_last: bool = False,
) -> torch.Tensor:
    """Linear layers with ReLU between them (and after the last when relu_last), in one op."""
    return torch.ops.hypatia.fused_mlp(input, list(weights), list(biases), relu_last)
