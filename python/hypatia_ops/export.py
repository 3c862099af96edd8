"""fuse_exported: a torch.export program with its Linear -> ReLU chains calling the fused ops.

The program's graph (torch.export's ATen IR: aten.linear / relu / dropout, or the addmm / mm forms
of a decomposed 2-D program) is rewritten by fx_fusion, the rules the torch.compile backend uses.
The result is an ordinary ExportedProgram: it runs through .module(), saves and loads with
torch.export.save / load (in a process that imported hypatia_ops, which registers the ops), can be
exported again, and compiles with torch._inductor.aoti_compile_and_package into a package that
calls the ops from C++ (the library must be loaded where the package runs).
"""
from __future__ import annotations

import copy
import struct
import zipfile
from typing import List, Tuple, Union

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import (ConstantArgument, CustomObjArgument, ExportGraphSignature, InputSpec,
                                          OutputSpec)

from . import FusionReport
from .fx_fusion import fuse_graph_module


def fuse_exported(ep: ExportedProgram, mlp: bool = True, *, return_report: bool = False
                  ) -> Union[ExportedProgram, Tuple[ExportedProgram, FusionReport]]:
    """A copy of `ep` whose Linear+ReLU pairs call hypatia::fused_linear_relu and whose Linear/ReLU
    chains (eval-mode dropout between layers included) call hypatia::fused_mlp (only pairs when
    `mlp` is False). Candidates that cannot be proven safe (an intermediate with another user, a
    node between the chain's nodes that may write to memory, train-mode dropout, operands the ops
    don't take) are left alone and listed in the report. `ep` itself is not changed; the copy
    shares its parameters and constants.

    Returns the fused program, or ``(program, FusionReport)`` when `return_report` is set.
    """
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"fuse_exported: ep must be a torch.export.ExportedProgram, but got {type(ep).__name__}")
    graph = torch.fx.Graph()
    output = graph.graph_copy(ep.graph, {})
    graph.output(output)
    gm = torch.fx.GraphModule(ep.graph_module, graph)
    gm.meta.update(ep.graph_module.meta)
    report = fuse_graph_module(gm, mlp=mlp)
    fused = ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=_signature_for(gm, ep.graph_signature),
        state_dict=ep.state_dict,
        range_constraints=copy.deepcopy(ep.range_constraints),
        module_call_graph=copy.deepcopy(ep.module_call_graph),
        example_inputs=ep.example_inputs,
        constants=ep.constants,
        verifiers=ep.verifiers,
    )
    return (fused, report) if return_report else fused


def _signature_for(gm: torch.fx.GraphModule, old: ExportGraphSignature) -> ExportGraphSignature:
    """`old` with its arguments renamed to the nodes of `gm` at the same places (the graph's copy
    may rename a placeholder; a fused node replaces a chain whose last node was an output)."""
    def renamed(arg, node):
        return arg if isinstance(arg, (ConstantArgument, CustomObjArgument)) else type(arg)(name=node.name)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    returned = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
    inputs = [InputSpec(s.kind, renamed(s.arg, n), s.target, s.persistent) for s, n in zip(old.input_specs, placeholders)]
    outputs = [OutputSpec(s.kind, renamed(s.arg, n), s.target) for s, n in zip(old.output_specs, returned)]
    return ExportGraphSignature(input_specs=inputs, output_specs=outputs)


def package_links_libstdcxx_statically(path: str) -> bool:
    """Whether a .pt2 package's compiled model carries its own libstdc++ (no libstdc++.so among its
    ELF DT_NEEDED entries) instead of using the process's. Where Inductor builds packages that way
    (seen on a GPU machine with Ubuntu 24.04 and gcc 13.3), every package, with or without the
    hypatia ops, crashed in torch._inductor.aoti_load_package inside the package's std::regex, while
    a C++ process (hypatia-run) loaded and ran the same files: docs/compile.md."""
    with zipfile.ZipFile(path) as package:
        libraries = [package.read(n) for n in package.namelist() if n.endswith(".so")]
    return any(not any(n.startswith("libstdc++.so") for n in _elf_needed(lib)) for lib in libraries)


def _elf_needed(image: bytes) -> List[str]:
    """The DT_NEEDED names of a little-endian ELF64 shared object held in memory."""
    if image[:6] != b"\x7fELF\x02\x01":
        return []
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 6:  # SHT_DYNAMIC; its sh_link names the string table (.dynstr)
            continue
        strtab = sections[link][4]
        for at in range(offset, offset + size, entsize or 16):
            tag, value = struct.unpack_from("<qQ", image, at)
            if tag == 1:  # DT_NEEDED
                end = image.index(b"\0", strtab + value)
                names.append(image[strtab + value:end].decode())
    return names
