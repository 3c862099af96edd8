"""The torch.compile backend "hypatia": ``torch.compile(model, backend="hypatia")``.

Dynamo's graph is rewritten before AOTAutograd (fx_fusion: Linear+ReLU pairs into
hypatia::fused_linear_relu, Linear/ReLU chains into hypatia::fused_mlp), then handed to Inductor
with the ``mode`` / ``options`` given to torch.compile. Rewriting before AOTAutograd keeps the ops'
own autograd: AOTAutograd traces their C++ Autograd kernels into the private forward ops that save
what the backward needs (_fused_linear_relu_masked, _fused_mlp_forward) and the backward ops
(_fused_linear_relu_backward, _fused_mlp_backward), so the compiled backward runs the ops' own
backward, not one derived from decompositions.

Inductor's caches (FX graph cache, AOTAutograd cache) key on the rewritten graph; the backend adds
a tag of its own (a hash of this package's rewrite code and of the loaded library, whose Autograd
kernels AOTAutograd traces) to torch.compiler.config.cache_key_tag while it compiles, so that a
changed pass or library never reuses a graph traced through the old one.

A graph left with nothing but fused ops, and a graph that will be differentiated, run without
AOTAutograd and Inductor: their per-call host time is all they add to the first and more than
Inductor's fusions save in the second (measured: docs/compile.md). mode, options or the option
"hypatia.inductor" (True / False) decide otherwise. The name "hypatia" is registered when torch._dynamo
is imported (by torch.compile), so that `import hypatia_ops` does not import it.
"""
from __future__ import annotations

import collections
import hashlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import Any, List, Optional

import torch

from . import FusionReport, library_path
from .fx_fusion import FUSED_LINEAR_RELU, FUSED_MLP, fuse_graph_module

EAGER_TARGETS = {FUSED_LINEAR_RELU, FUSED_MLP, torch.ops.aten._to_copy.default}
# The backend's own key in torch.compile's options: True / False sends every graph to Inductor / none.
INDUCTOR_OPTION = "hypatia.inductor"

# The reports of the graphs compiled last, oldest first (one per graph: a graph break makes two).
_reports: collections.deque = collections.deque(maxlen=64)
_cache_tag: Optional[str] = None


def last_compile_report() -> Optional[FusionReport]:
    """What the backend fused in the graph it compiled last (None before its first graph)."""
    return _reports[-1] if _reports else None


def compile_reports() -> List[FusionReport]:
    """The reports of the last (up to 64) graphs the backend compiled, oldest first."""
    return list(_reports)


def cache_tag() -> str:
    """What the backend adds to Inductor's cache keys: a hash of the rewrite's code and the library."""
    global _cache_tag
    if _cache_tag is None:
        digest = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for path in (here / "fx_fusion.py", here / "compile_backend.py", library_path()):
            digest.update(Path(path).read_bytes())
        _cache_tag = "hypatia-" + digest.hexdigest()[:32]
    return _cache_tag


def rewrite(gm: torch.fx.GraphModule) -> FusionReport:
    """The backend's rewrite alone: fuses Dynamo's graph `gm` in place and records the report."""
    report = fuse_graph_module(gm)
    _reports.append(report)
    return report


def only_fused_ops(gm: torch.fx.GraphModule) -> bool:
    """Whether every call in `gm` is a fused op (or autocast's cast of its operands): nothing that
    Inductor could generate code for."""
    return all(n.op in ("placeholder", "output", "get_attr") or (n.op == "call_function" and n.target in EAGER_TARGETS)
               for n in gm.graph.nodes)


def differentiated(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> bool:
    """Whether autograd will record `gm`'s calls: grad mode is on (Dynamo guards on it) and an input
    or parameter requires grad."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)] + list(gm.parameters())
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def hypatia_backend(gm: torch.fx.GraphModule, example_inputs: List[Any], mode: Optional[str] = None,
                    options: Optional[dict] = None):
    """Fuses `gm` in place, records the report, and compiles it with Inductor, or returns it to run as
    it is (the fused ops with their C++ autograd, the rest eager) where it holds nothing but fused ops
    or will be differentiated (docs/compile.md: AOTAutograd's and Inductor's host time), unless mode
    or options ask Inductor for something. options["hypatia.inductor"] (True / False) decides alone."""
    options = dict(options or {})
    use_inductor = options.pop(INDUCTOR_OPTION, None)
    if use_inductor not in (None, True, False):
        raise ValueError(f'backend "hypatia": options["{INDUCTOR_OPTION}"] must be True or False, not {use_inductor!r}')
    rewrite(gm)
    if use_inductor is None:
        use_inductor = bool(mode or options) or not (only_fused_ops(gm) or differentiated(gm, example_inputs))
    if not use_inductor:
        return gm.forward
    inductor = torch._TorchCompileInductorWrapper(mode, options or None, None)
    user_tag = torch.compiler.config.cache_key_tag
    with torch.compiler.config.patch(cache_key_tag=f"{user_tag}|{cache_tag()}" if user_tag else cache_tag()):
        return inductor(gm, example_inputs)


class _RegisterWhenDynamoLoads(importlib.abc.MetaPathFinder):
    """Registers the backend right after torch._dynamo's own import, which torch.compile makes:
    importing torch._dynamo here would add about a second to every `import hypatia_ops`."""

    def find_spec(self, name, path, target=None):
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            module.register_backend(hypatia_backend, name="hypatia")

        spec.loader.exec_module = exec_then_register
        return spec


if "torch._dynamo" in sys.modules:
    torch._dynamo.register_backend(hypatia_backend, name="hypatia")
else:
    sys.meta_path.insert(0, _RegisterWhenDynamoLoads())
