#!/usr/bin/env python3
"""Differential fuzzer of the TorchScript fusion passes (passes/*.cpp).

    python tests/fuzz/fuzz_passes.py --count N [--seed S] [--start K] [--device cpu|cuda] [--jobs J]
                                     [--log FILE] [--cli-fraction F] [--quiet]

Generates small ``nn.Module`` programs as Python source from a seeded ``random.Random`` (program i
of seed S is the same on every run and machine, whatever --jobs is), runs each through some of the
pipelines below with and without the fusion, and compares.

What the programs contain: ``nn.Linear`` with and without bias, some called from two places
(shared); ReLU in every spelling (``nn.ReLU()``, ``nn.ReLU(inplace=True)``, ``F.relu``,
``F.relu(inplace=True)``, ``torch.relu``, ``x.relu()``, ``x.relu_()``); ``nn.Dropout`` and
``F.dropout(p, self.training)`` (modules in train and in eval mode); residual adds, ``mul``,
``view``/``reshape``/``flatten``/``transpose``/``cat``/``chunk``; in-place ops on intermediates and
on the input; intermediates used twice or returned; tensor, tuple, list and dict outputs;
``if`` blocks (on data and on ``self.training``) and ``for`` loops; nested and shared submodules; a
second ``@torch.jit.export`` method; inputs of rank 1 to 4, empty batches (a dimension of 0), NaN
and infinity in the input; float32, float64, bfloat16 and float16.

Pipelines (a random subset per program, the coverage counts print at the end): the frontend
(``torch.jit.script`` or ``torch.jit.trace_module``, both methods), the module's mode (train or
eval), freezing, how it is fused:

- ``api``: ``hypatia_ops.fuse(m, freeze, mlp, return_report=True)``;
- ``file``: ``hypatia_ops.fuse_file`` on a saved file;
- ``cli``: ``build/hypatia-fuse [--freeze] [--no-mlp] --report R IN OUT`` (a process: a fraction of
  the programs only, --cli-fraction);
- ``auto``: ``hypatia_ops.enable_auto_fusion()`` (in a worker process of its own, since it cannot be
  turned off): the module run with the executor's optimisations (where the post pass fuses) against
  the same module under ``torch.jit.optimized_execution(False)``;

then ``torch.jit.optimize_for_inference`` and a ``torch.jit.save``/``load`` round trip.

Oracle, per pipeline: the reference is the same pipeline without the fusion (the same scripted or
traced module, frozen by ``torch.jit.freeze`` where the fused one is frozen by ``fuse(freeze=True)``,
through the same ``optimize_for_inference`` and save/load), run twice (the profiling executor's
first and optimised runs), with the same dropout RNG seed. Then:

- every output (tensors of tuples, lists and dicts; and the input, which programs may write in
  place) has the reference's shape and dtype, NaN exactly where the reference has NaN, infinities
  of the same sign where it has them, and a relative error (2-norm over the finite elements) within
  the dtype's tolerance (TOLERANCE below);
- gradients (non-frozen modules, and frozen ones for the input): of a fixed random weighting of
  the outputs, with respect to the input and every parameter, compared the same way (GRAD_TOLERANCE);
- nothing raises where the reference does not, and no worker dies (a dead or hung worker is a crash);
- the report is consistent with the fused graph (``api``, ``file``, ``cli``): ``linear_relu`` and
  ``mlp`` equal the hypatia::fused_linear_relu and hypatia::fused_mlp nodes of the fused module's
  methods, ``mlp_layers`` the weights of those fused_mlp nodes, every ``skipped`` line names a node and
  gives a non-empty reason, and every Linear whose output still reaches a ReLU (directly, through a
  dropout or a bias add) is named by a skipped line.

Exclusions (PyTorch's behaviour, not the passes'): a pipeline whose reference fails (e.g. tracing a
construct that the tracer refuses, or an optimize_for_inference that raises on the unfused module) is
not run fused and is counted as ``ref-failed``; with NaN or infinity in the input, gradients are
not compared (outputs are): the unfused scripted or traced module's own optimised runs (the profiling
executor's autodiff) put NaN and infinity in other gradient elements than its first run and eager
mode do, so the reference is no oracle there; in train mode with gradients, programs with a dropout of p > 0 are compared on the first
(profiling) run only: the optimised runs move dropout into autodiff subgraphs where its neighbours
allow, which draw other masks from the same seed, and the fused graph's neighbours differ;
an auto-fusion variant that fails is run again without auto-fusion (PyTorch's optimised runs
against its unoptimised one alone), and when that fails too it counts as ``pytorch-unstable``, not as
a mismatch (dropout returning its input, an alias its schema does not declare, makes the optimised
executor's runs of in-place ReLUs differ from the first run); for the same reason, in any pipeline,
when a deterministic program's reference gives another result in its optimised call than in its
first on the same input, only the first calls are compared and the pipeline counts as
``pytorch-unstable`` (seed 1 program 3912: ``h19 = F.dropout(h18, 0.0, self.training); h20 =
h19.relu_(); h21 = h20 + h18``, train mode with gradients: eager mode and the first call write h18
through the alias; the optimised call differentiates dropout as native_dropout, a fresh tensor, and
does not, with or without the library, while the fused module keeps eager's result); a
half-precision difference beyond the tolerances is no mismatch where the fused result is at least as
accurate as the reference (HALF_F64_FALLBACK below: against the same module in float64); the scripted or traced module is made
afresh for each pipeline, so that the reference and the fused module have run as often; programs
that write to their input in place run without
gradients: PyTorch's scripted autodiff of such programs fails or not ("a view of a leaf Variable ...",
"tensor does not have a device") depending on what the process's executors ran before, fused or not; a program that fails in eager mode is regenerated
(never happens by construction, counted as ``invalid``).

A failing program is shrunk (statements and layers deleted while the same failure remains, then the
input made smaller and float32) and printed as Python: the module's source and the CASE to pass to
``check_program`` (tests/python/test_fuzz_regressions.py keeps each bug found that way).

The log has one line per failing program (and with --log FILE, one line per program there), the
commit, seed, count and device at the start, coverage counts and programs/s near the end, and as its
last line exactly ``fuzz: N programs, M mismatches, C crashes``. The exit status is non-zero iff
there are mismatches or crashes. Library and tools: $HYPATIA_OPS_LIBRARY (else build/), hypatia-fuse
in $HYPATIA_BUILD_DIR (else build/).
"""
from __future__ import annotations

import argparse
import collections
import json
import linecache
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HYPATIA_BUILD_DIR", ROOT / "build"))
TASK_TIMEOUT_S = 120
WORKER_RECYCLE = 150  # programs per worker process before it is replaced (compiled classes pile up)

DTYPES = ["float32", "float64", "bfloat16", "float16"]
# Relative 2-norm error allowed against the unfused model computed the same way.
TOLERANCE = {"float64": 1e-10, "float32": 2e-5, "bfloat16": 3e-2, "float16": 5e-3}
# Gradients of half-precision models: a pre-activation within rounding of 0 may take the other side
# of the ReLU when the fused op rounds once where eager rounds twice, and carry a whole element's
# gradient (or none) through; with a few hidden units per row one such element is a large share.
GRAD_TOLERANCE = {"float64": 1e-9, "float32": 5e-5, "bfloat16": 3e-1, "float16": 1e-1}
# HALF_F64_FALLBACK: a half-precision mismatch beyond these tolerances is no failure when the fused
# result is at least as accurate as the reference's: every output and gradient's error against the
# same module in float64 (eager, same rounded weights and input) at most F64_FACTOR times the
# unfused reference's own error plus the dtype's TOLERANCE. The reference rounds at other points
# (each GEMM's output, the bias add, the ReLU mask of pre-activations within rounding of 0), and
# where a layer cancels (output norm << its terms) its own error is larger than any fixed bound:
# seed 1 program 7118 (float16, output |ref| 0.06): unfused 8.4e-3 from float64, fused 2.2e-3;
# seed 0 program 762 (float16, grad of fc3.bias): unfused 0.145 from float64, fused 0.001.
F64_FACTOR = 2.0


# =================================================================================================
# Program generation (pure Python: the parent process never imports torch)
# =================================================================================================

RELU_SPELLINGS = ["F.relu({x})", "torch.relu({x})", "{x}.relu()", "F.relu({x}, inplace=True)", "MOD", "MODI",
                  "INPLACE"]


class Gen:
    """Builds one program: a class M (and helper classes) as source lines, with concrete shapes."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.init: List[List[str]] = []  # chunks of M.__init__'s body
        self.body: List[List[str]] = []  # chunks of M.forward's body
        self.helpers: List[List[str]] = []  # helper classes (chunks of whole class text)
        self.vars: Dict[str, Tuple[int, ...]] = {}
        self.contig: Dict[str, bool] = {}
        self.linears: Dict[str, Tuple[int, int]] = {}
        self.n = 0
        self.features: collections.Counter = collections.Counter()

    def fresh(self, prefix="h"):
        self.n += 1
        return f"{prefix}{self.n}"

    def feat(self, name):
        self.features[name] += 1

    def pick(self, pred=lambda s: True):
        names = [v for v, s in self.vars.items() if pred(s)]
        if not names:
            return None
        # Prefer recent values (chains), sometimes an old one (a value used twice).
        if self.rng.random() < 0.7:
            return names[-1]
        return self.rng.choice(names)

    def define(self, name, shape, contig=True):
        self.vars[name] = tuple(shape)
        self.contig[name] = contig

    def linear(self, fin, fout=None, reuse=True):
        """The attribute name of a Linear taking fin features (a shared one sometimes)."""
        same = [n for n, (i, o) in self.linears.items() if i == fin and (fout is None or o == fout)]
        if same and reuse and self.rng.random() < 0.25:
            self.feat("linear-shared")
            return same[0], self.linears[same[0]][1]
        fout = fout if fout is not None else self.rng.choice([1, 3, 4, 8, 16, 33])
        bias = self.rng.random() < 0.75
        name = self.fresh("fc")
        self.init.append([f"self.{name} = nn.Linear({fin}, {fout}, bias={bias})"])
        self.linears[name] = (fin, fout)
        self.feat("linear-bias" if bias else "linear-nobias")
        return name, fout

    def relu(self, x):
        """A statement list applying a ReLU to x, defining a new name (or x itself in place)."""
        s = self.rng.choice(RELU_SPELLINGS)
        self.feat("relu:" + s.split("(")[0].replace("{x}", "x"))
        shape = self.vars[x]
        if s == "INPLACE":
            out = self.fresh()
            self.define(out, shape, self.contig[x])
            return [f"{out} = {x}.relu_()"]
        out = self.fresh()
        if s in ("MOD", "MODI"):
            mod = self.fresh("act")
            self.init.append([f"self.{mod} = nn.ReLU({'inplace=True' if s == 'MODI' else ''})"])
            line = f"{out} = self.{mod}({x})"
        else:
            line = f"{out} = " + s.format(x=x)
        self.define(out, shape, self.contig[x])
        return [line]

    def step(self):
        r = self.rng.random()
        x = self.pick()
        shape = self.vars[x]
        f = shape[-1]
        if r < 0.30:  # Linear (+ ReLU), the fusion's food
            name, fout = self.linear(f)
            out = self.fresh()
            self.define(out, shape[:-1] + (fout,))
            lines = [f"{out} = self.{name}({x})"]
            if self.rng.random() < 0.25:
                self.feat("dropout")
                d = self.fresh()
                if self.rng.random() < 0.5:
                    mod = self.fresh("drop")
                    self.init.append([f"self.{mod} = nn.Dropout({self.rng.choice([0.0, 0.3])})"])
                    lines.append(f"{d} = self.{mod}({out})")
                else:
                    lines.append(f"{d} = F.dropout({out}, {self.rng.choice([0.0, 0.2])}, self.training)")
                self.define(d, self.vars[out])
                out = d
            if self.rng.random() < 0.8:
                lines += self.relu(out)
            self.body.append(lines)
        elif r < 0.38:
            self.body.append(self.relu(x))
        elif r < 0.46:  # residual add / mul
            same = [v for v, s in self.vars.items() if s == shape and v != x]
            out = self.fresh()
            kind = self.rng.random()
            if same and kind < 0.5:
                self.feat("add")
                line = f"{out} = {x} + {self.rng.choice(same)}"
            elif same and kind < 0.7:
                self.feat("mul")
                line = f"{out} = {x} * {self.rng.choice(same)}.clamp(-2.0, 2.0)"
            else:
                self.feat("mul-scalar")
                line = f"{out} = {x} * {self.rng.choice(['0.5', '2.0', '-1.0'])}"
            self.define(out, shape)
            self.body.append([line])
        elif r < 0.58:  # shape ops
            self.shape_op(x, shape)
        elif r < 0.66:  # in-place on an intermediate or the input
            target = "x" if self.rng.random() < 0.3 and "x" in self.vars else x
            self.feat("inplace-input" if target == "x" else "inplace-intermediate")
            op = self.rng.choice([".add_(1.0)", ".mul_(0.5)", ".sub_(0.25)", ".relu_()", ".clamp_(-1.0, 1.0)"])
            if op == ".relu_()":
                self.feat("relu:x.relu_")
            self.body.append([f"{target}{op}"])
        elif r < 0.74:  # if block
            self.if_block(x, shape)
        elif r < 0.80:  # loop over a square layer
            self.feat("loop")
            name, _ = self.linear(f, f)
            out = self.fresh()
            self.define(out, shape)
            self.body.append([f"{out} = {x}", f"for _ in range({self.rng.choice([1, 2, 3])}):",
                              f"    {out} = F.relu(self.{name}({out}))"])
        elif r < 0.90:  # submodule
            self.submodule(x, shape)
        else:  # chain of several Linear+ReLU (fused_mlp)
            self.feat("chain")
            cur, lines = x, []
            for _ in range(self.rng.choice([2, 3, 4])):
                name, fout = self.linear(self.vars[cur][-1])
                out = self.fresh()
                self.define(out, self.vars[cur][:-1] + (fout,))
                lines.append(f"{out} = self.{name}({cur})")
                cur = out
                if self.rng.random() < 0.85:
                    lines += self.relu(cur)
                    cur = lines[-1].split(" = ")[0] if " = " in lines[-1] else cur
            self.body.append(lines)

    def shape_op(self, x, shape):
        rng = self.rng
        out = self.fresh()
        choice = rng.choice(["view", "reshape", "flatten", "transpose", "cat", "chunk", "unsqueeze"])
        if choice == "view" and len(shape) >= 2 and self.contig[x]:
            self.feat("view")
            self.define(out, (-1 if False else _prod(shape[:-1]), shape[-1]))
            self.body.append([f"{out} = {x}.view(-1, {shape[-1]})" if _prod(shape[:-1]) else
                              f"{out} = {x}.view({_prod(shape[:-1])}, {shape[-1]})"])
        elif choice == "reshape" and len(shape) >= 1:
            self.feat("reshape")
            if len(shape) >= 2 and shape[-1] % 2 == 0 and rng.random() < 0.5:
                new = shape[:-1] + (2, shape[-1] // 2)
            else:
                new = (_prod(shape),)
            self.define(out, new)
            self.body.append([f"{out} = {x}.reshape({', '.join(map(str, new))})"])
        elif choice == "flatten" and len(shape) >= 3:
            self.feat("flatten")
            self.define(out, (_prod(shape[:-1]), shape[-1]))
            self.body.append([f"{out} = torch.flatten({x}, 0, -2)"])
        elif choice == "transpose" and len(shape) >= 2:
            self.feat("transpose")
            if len(shape) >= 3 and rng.random() < 0.5:
                new = (shape[1], shape[0]) + shape[2:]
                self.body.append([f"{out} = {x}.transpose(0, 1)"])
            else:
                new = shape[:-2] + (shape[-1], shape[-2])
                self.body.append([f"{out} = {x}.transpose(-2, -1)"])
            self.define(out, new, contig=False)
        elif choice == "cat":
            self.feat("cat")
            same = [v for v, s in self.vars.items() if s[:-1] == shape[:-1]]
            y = rng.choice(same)
            self.define(out, shape[:-1] + (shape[-1] + self.vars[y][-1],))
            self.body.append([f"{out} = torch.cat([{x}, {y}], dim=-1)"])
        elif choice == "chunk" and shape[-1] % 2 == 0 and shape[-1] > 0:
            self.feat("chunk")
            other = self.fresh()
            half = shape[:-1] + (shape[-1] // 2,)
            self.define(out, half, contig=len(shape) == 1)
            self.define(other, half, contig=len(shape) == 1)
            self.body.append([f"{out}, {other} = {x}.chunk(2, dim=-1)"])
        else:
            self.feat("unsqueeze")
            self.define(out, (1,) + shape)
            self.body.append([f"{out} = {x}.unsqueeze(0)"])

    def if_block(self, x, shape):
        rng = self.rng
        out = self.fresh()
        cond = rng.choice(["self.training", f"bool({x}.sum() > 0)", f"{x}.numel() > 0"])
        self.feat("if-training" if cond == "self.training" else "if-data")
        name, _ = self.linear(shape[-1], shape[-1])
        then = [f"    {out} = F.relu(self.{name}({x}))"]
        if rng.random() < 0.5:
            other = [f"    {out} = {x} * 2.0"]
        else:
            other = [f"    {out} = torch.relu(self.{name}({x}) + 1.0)"]
        self.define(out, shape)
        self.body.append([f"if {cond}:"] + then + ["else:"] + other)

    def submodule(self, x, shape):
        """A helper class (Linear+ReLU, maybe a nested one inside); an instance called once or
        twice, or shared under two attribute names."""
        rng = self.rng
        f = shape[-1]
        hid = rng.choice([4, 8, 16])
        cls = self.fresh("Sub")
        nested = rng.random() < 0.4
        self.feat("submodule-nested" if nested else "submodule")
        text = [f"class {cls}(nn.Module):", "    def __init__(self):", "        super().__init__()",
                f"        self.a = nn.Linear({f}, {hid})", f"        self.b = nn.Linear({hid}, {f}, bias={rng.random() < 0.7})"]
        if nested:
            inner = self.fresh("Inner")
            self.helpers.append([f"class {inner}(nn.Module):", "    def __init__(self):", "        super().__init__()",
                                 f"        self.l = nn.Linear({hid}, {hid})",
                                 f"        self.act = nn.ReLU()",
                                 "    def forward(self, z):", "        return self.act(self.l(z))"])
            text.append(f"        self.inner = {inner}()")
            text += ["    def forward(self, y):", "        z = F.relu(self.a(y))", "        z = self.inner(z)",
                     "        return self.b(z)"]
        else:
            relu = rng.choice(["F.relu(self.a(y))", "torch.relu(self.a(y))", "self.a(y).relu()"])
            text += ["    def forward(self, y):", f"        return self.b({relu})"]
        self.helpers.append(text)
        attr = self.fresh("sub")
        self.init.append([f"self.{attr} = {cls}()"])
        out = self.fresh()
        self.define(out, shape)
        lines = [f"{out} = self.{attr}({x})"]
        if rng.random() < 0.4:
            self.feat("submodule-shared")
            alias = self.fresh("sub")
            self.init.append([f"self.{alias} = self.{attr}"])
            out2 = self.fresh()
            self.define(out2, shape)
            lines.append(f"{out2} = torch.relu(self.{alias}({out}))")
        self.body.append(lines)


def _prod(shape):
    p = 1
    for s in shape:
        p *= s
    return p


def generate(seed: int, index: int) -> Dict[str, Any]:
    """Program `index` of `seed`: {'source', 'shape', 'dtype', 'methods', 'special', 'features'}."""
    rng = random.Random(f"{seed}:{index}")
    rank = rng.choice([1, 2, 2, 3, 3, 4])
    lead = [rng.choice([1, 2, 3, 5]) for _ in range(rank - 1)]
    if lead and rng.random() < 0.1:
        lead[rng.randrange(len(lead))] = 0
    fin = rng.choice([1, 4, 8, 12, 16])
    shape = tuple(lead) + (fin,)
    dtype = rng.choices(DTYPES, weights=[5, 2, 2, 2])[0]
    gen = Gen(rng)
    gen.define("x", shape)
    for _ in range(rng.randint(1, 7)):
        gen.step()
    # Outputs: the last value and sometimes others (intermediates returned).
    names = [v for v in gen.vars if v != "x"] or ["x"]
    outs = [names[-1]]
    if rng.random() < 0.4:
        outs.append(rng.choice(names))
    form = rng.choice(["tensor", "tuple", "list", "dict"]) if len(outs) > 1 else rng.choice(["tensor"] * 3 + ["tuple"])
    gen.feat("out-" + form)
    if form == "tensor":
        ret = f"return {outs[0]}"
    elif form == "tuple":
        ret = f"return ({', '.join(outs)},)"
    elif form == "list":
        ret = f"return [{', '.join(outs)}]"
    else:
        ret = "return {" + ", ".join(f"'{k}{i}': {v}" for i, (k, v) in enumerate(zip('ab', outs))) + "}"
    methods = ["forward"]
    aux = []
    if rng.random() < 0.25:
        gen.feat("method-export")
        methods.append("aux")
        name, _ = gen.linear(fin)
        name2, _ = gen.linear(gen.linears[name][1])
        aux = ["    @torch.jit.export", "    def aux(self, x):",
               f"        return self.{name2}(F.relu(self.{name}(x))).relu()"]
    lines = []
    for chunk in gen.helpers:
        lines += chunk + [""]
    lines += ["class M(nn.Module):", "    def __init__(self):", "        super().__init__()"]
    for chunk in gen.init:
        lines += ["        " + l for l in chunk]
    lines += ["    def forward(self, x):"]
    for chunk in gen.body:
        lines += ["        " + l for l in chunk]
    lines += ["        " + ret] + aux
    special = rng.choice(["none"] * 8 + ["nan", "inf"])
    gen.feat(f"rank{rank}")
    gen.feat("dtype-" + dtype)
    if 0 in shape:
        gen.feat("empty-batch")
    if special != "none":
        gen.feat("input-" + special)
    return {"source": "\n".join(lines) + "\n", "shape": list(shape), "dtype": dtype, "methods": methods,
            "special": special, "features": dict(gen.features), "seed": seed, "index": index}


FRONTENDS = ["script", "trace"]
HOWS = ["api", "file", "cli", "auto"]


def variant_name(v: Dict[str, Any]) -> str:
    return "{frontend}/{mode}/{how}{freeze}{nomlp}{ofi}{save}{grad}".format(
        frontend=v["frontend"], mode=v["mode"], how=v["how"], freeze="+freeze" if v["freeze"] else "",
        nomlp="+nomlp" if not v["mlp"] else "", ofi="+ofi" if v["ofi"] else "", save="+saveload" if v["save"] else "",
        grad="+grad" if v["grad"] else "")


def parse_variant(name: str) -> Dict[str, Any]:
    frontend, mode, rest = name.split("/")
    parts = rest.split("+")
    return {"frontend": frontend, "mode": mode, "how": parts[0], "freeze": "freeze" in parts,
            "mlp": "nomlp" not in parts, "ofi": "ofi" in parts, "save": "saveload" in parts, "grad": "grad" in parts}


def choose_variants(seed: int, index: int, cli_fraction: float) -> List[Dict[str, Any]]:
    rng = random.Random(f"variants:{seed}:{index}")
    variants = []
    for _ in range(rng.choice([2, 3, 4])):
        how = rng.choices(HOWS, weights=[6, 2, 0, 2])[0]
        if rng.random() < cli_fraction / 2:
            how = "cli"
        mode = rng.choice(["train", "eval"])
        freeze = mode == "eval" and rng.random() < 0.5
        ofi = mode == "eval" and rng.random() < 0.3
        v = {"frontend": rng.choice(FRONTENDS), "mode": mode, "how": how, "freeze": freeze,
             "mlp": rng.random() < 0.8, "ofi": ofi, "save": rng.random() < 0.3 and how != "auto",
             "grad": rng.random() < 0.5}
        if how == "auto":
            v["mlp"] = True  # the post pass always fuses chains
        if v not in variants:
            variants.append(v)
    return variants


# =================================================================================================
# The worker: runs programs through pipelines (imports torch and hypatia_ops)
# =================================================================================================

def _worker_imports():
    global torch, nn, F, hypatia_ops
    import warnings
    warnings.filterwarnings("ignore")  # TorchScript's deprecation, TracerWarnings
    import torch  # noqa: F811
    import torch.nn as nn  # noqa: F811
    import torch.nn.functional as F  # noqa: F811
    sys.path.insert(0, str(ROOT / "python"))
    import hypatia_ops  # noqa: F811


def _last_line(e: BaseException) -> str:
    """The informative line of an exception's message (TorchScript's come with a traceback)."""
    lines = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
    return (lines[-1] if lines else "")[:300]


class RefFailed(Exception):
    pass


def _flatten(out) -> List[Tuple[str, Any]]:
    if isinstance(out, torch.Tensor):
        return [("", out)]
    if isinstance(out, (tuple, list)):
        return [(f"[{i}]{k}", t) for i, o in enumerate(out) for k, t in _flatten(o)]
    if isinstance(out, dict):
        return [(f"[{k!r}]{kk}", t) for k in sorted(out) for kk, t in _flatten(out[k])]
    return [("", out)]


def weighted_sum(outputs):
    """The scalar whose gradients are compared: the outputs weighted by a fixed random tensor each
    (the same weights for the reference, the fused module and the float64 check), in float64."""
    g = torch.Generator().manual_seed(99)
    return sum((t.double() * torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.device)).sum() for t in outputs)


def _compare(what: str, ref, out, tol: float) -> Optional[str]:
    if ref is None or out is None:
        if ref is None and out is None:
            return None
        other = out if ref is None else ref
        if isinstance(other, torch.Tensor) and not other.any():
            return None  # an unused parameter's gradient: None on one side, zeros on the other
        return f"{what}: {'None' if ref is None else 'a tensor'} in the reference, {'None' if out is None else 'a tensor'} fused"
    if not isinstance(ref, torch.Tensor):
        return None if ref == out else f"{what}: {ref!r} != {out!r}"
    if not isinstance(out, torch.Tensor):
        return f"{what}: reference is a tensor, fused gives {type(out).__name__}"
    if ref.shape != out.shape or ref.dtype != out.dtype:
        return f"{what}: reference {tuple(ref.shape)} {ref.dtype}, fused {tuple(out.shape)} {out.dtype}"
    r, o = ref.detach().double().cpu(), out.detach().double().cpu()
    if not torch.equal(r.isnan(), o.isnan()):
        return f"{what}: NaN at other positions ({int(r.isnan().sum())} in the reference, {int(o.isnan().sum())} fused)"
    rinf, oinf = r.isinf(), o.isinf()
    if not torch.equal(rinf, oinf) or not torch.equal(r[rinf], o[oinf]):
        return f"{what}: infinities at other positions or signs"
    fin = r.isfinite()
    r, o = r[fin], o[fin]
    if r.numel() == 0:
        return None
    err = (r - o).norm().item()
    scale = r.norm().item()
    if err > tol * scale + tol * 1e-3 * r.numel() ** 0.5:
        return f"{what}: relative error {err / max(scale, 1e-300):.3g} > {tol:g} (|ref| {scale:.3g})"
    return None


HYPATIA_KINDS = ("hypatia::fused_linear_relu", "hypatia::fused_mlp")


def _nodes(block):
    for n in block.nodes():
        yield n
        for b in n.blocks():
            yield from _nodes(b)


def _method_graphs(module):
    return [(name, module._c._get_method(name).graph) for name in module._c._method_names()]


def _is_linear_like(n) -> bool:
    kind = n.kind()
    if kind == "aten::linear":
        return True
    if kind in ("aten::addmm", "aten::matmul"):
        w = n.inputsAt(2 if kind == "aten::addmm" else 1)
        wn = w.node()
        if wn.kind() == "aten::t":
            return True
        if wn.kind() == "prim::Constant" and w.type().kind() == "TensorType":
            t = w.toIValue()
            return isinstance(t, torch.Tensor) and t.dim() == 2
    return False


def _reaches_relu(v, through_add: bool) -> bool:
    for _ in range(32):
        users = [u.user for u in v.uses()]
        if any(u.kind() in ("aten::relu", "aten::relu_") and u.inputsAt(0) == v for u in users):
            return True
        nxt = [u for u in users if u.kind() in ("aten::dropout", "aten::dropout_") and u.inputsAt(0) == v]
        if through_add:
            nxt += [u for u in users if u.kind() in ("aten::add", "aten::add_")]
            through_add = False
        if not nxt:
            return False
        v = nxt[0].output()
    return False


def check_report(module, report, names: bool = True) -> Optional[str]:
    """None when `report` (FusionReport) agrees with the fused module's graphs. `names`: the graphs
    are those the passes saw (not reloaded from a file, where values may be renamed), so that each
    Linear left feeding a ReLU must be named by a skipped line; else only counted against them."""
    counts = collections.Counter()
    layers = 0
    unreported = []
    skipped = list(report.skipped)
    for line in skipped:
        head, sep, why = line.partition(": ")
        if not sep or not why.strip() or " -> %" not in head:
            return f"report: skipped line without a node and a reason: {line!r}"
    heads = {line.partition(": ")[0] for line in skipped}
    for _, graph in _method_graphs(module):
        for n in _nodes(graph):
            if n.kind() in HYPATIA_KINDS:
                counts[n.kind()] += 1
                if n.kind() == "hypatia::fused_mlp":
                    wl = n.inputsAt(1).node()
                    layers += len(list(wl.inputs())) if wl.kind() == "prim::ListConstruct" else len(n.inputsAt(1).toIValue())
            elif _is_linear_like(n) and _reaches_relu(n.output(), n.kind() == "aten::matmul"):
                head = f"{n.kind()} -> %{n.output().debugName()}"
                if head not in heads or not names:
                    unreported.append(head)
    if counts["hypatia::fused_linear_relu"] != report.linear_relu or counts["hypatia::fused_mlp"] != report.mlp:
        return (f"report: linear_relu {report.linear_relu}, mlp {report.mlp}; graph has "
                f"{counts['hypatia::fused_linear_relu']} fused_linear_relu, {counts['hypatia::fused_mlp']} fused_mlp")
    if layers != report.mlp_layers:
        return f"report: mlp_layers {report.mlp_layers}, the graph's fused_mlp nodes have {layers} weights"
    if not names:
        if len(unreported) > len(skipped):
            return f"report: {len(unreported)} Linear feeding a ReLU left unfused, {len(skipped)} skipped lines"
    elif unreported:
        return f"report: Linear feeding a ReLU left unfused without a skipped line: {', '.join(unreported)}"
    return None


class Runner:
    """Runs one program's variants in this (worker) process."""

    serial = 0

    def __init__(self, prog, device: str, tmp: Path, emit=None):
        self.prog = prog
        self.device = device
        self.tmp = tmp
        self.emit = emit or (lambda msg: None)
        self.dtype = getattr(torch, prog["dtype"])
        self.ns = self.classes()
        self.cache: Dict[Tuple, Any] = {}
        g = torch.Generator().manual_seed(12345)
        x = torch.randn(*prog["shape"], generator=g, dtype=torch.float64)
        if prog["special"] != "none" and x.numel():
            flat = x.view(-1)
            flat[int(torch.randint(x.numel(), (1,), generator=g))] = float(prog["special"])
        self.x = x.to(self.dtype).to(device)

    def classes(self) -> Dict[str, Any]:
        """The program's classes, defined anew: torch.jit.script compiles a class once, and its
        methods' executors (warm after a run) are shared by every module scripted from it."""
        ns: Dict[str, Any] = {"torch": torch, "nn": nn, "F": F}
        # TorchScript reads the source through inspect/linecache: register it under a unique name.
        Runner.serial += 1
        prog = self.prog
        filename = f"/fuzz-program/{prog.get('seed')}-{prog.get('index')}-{os.getpid()}-{Runner.serial}.py"
        lines = prog["source"].splitlines(keepends=True)
        linecache.cache[filename] = (len(prog["source"]), None, lines, filename)
        ns["__name__"] = f"fuzz_program_{Runner.serial}"
        exec(compile(prog["source"], filename, "exec"), ns)
        return ns

    def model(self, fresh: bool = False):
        torch.manual_seed(1)
        m = (self.classes() if fresh else self.ns)["M"]()
        return m.to(self.device).to(self.dtype)

    def eager_check(self):
        m = self.model()
        with torch.no_grad():
            for meth in self.prog["methods"]:
                getattr(m, meth)(self.x.clone())

    def base(self, frontend, mode):
        """The scripted or traced module, made afresh for each variant: a module that earlier
        variants ran has optimised executors, and its next call is not the same pipeline as the
        fused copy's first (PyTorch's optimised runs can differ from the first run, e.g. where
        dropout returns its input, an alias its schema does not declare)."""
        key = (frontend, mode, Runner.serial)
        Runner.serial += 1
        if key not in self.cache:
            m = self.model(fresh=True)
            m.train(mode == "train")
            try:
                if frontend == "script":
                    sm = torch.jit.script(m)
                else:
                    torch.manual_seed(7)
                    # Only forward: @torch.jit.export methods are compiled by the tracer as scripted code.
                    sm = torch.jit.trace_module(m, {"forward": (self.x.clone(),)}, check_trace=False, strict=False)
            except Exception as e:  # PyTorch's limit, not ours
                self.cache[key] = RefFailed(f"{frontend}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            else:
                self.cache[key] = sm
        if isinstance(self.cache[key], RefFailed):
            raise self.cache[key]
        return self.cache[key]

    def run_model(self, m, grad: bool, methods):
        """{method: (flattened outputs of the 2nd call, input after the call, grads by name)}."""
        results = {}
        params = dict(m.named_parameters()) if grad and hasattr(m, "training") else {}
        params = {k: p for k, p in params.items() if p.requires_grad}
        for meth in methods:
            fn = getattr(m, meth)
            res = None
            for call in range(2):
                torch.manual_seed(100 + call)
                leaf = self.x.clone().requires_grad_(grad and self.dtype.is_floating_point)
                inp = leaf.clone() if grad else leaf
                with torch.set_grad_enabled(grad):
                    out = fn(inp)
                flat = _flatten(out)
                grads = {}
                if grad:
                    diff = [(k, t) for k, t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
                    if diff:
                        loss = weighted_sum(t for _, t in diff)
                        names = ["input"] + list(params)
                        got = torch.autograd.grad(loss, [leaf] + list(params.values()), allow_unused=True)
                        grads = dict(zip(names, got))
                res = (flat, inp.detach(), grads)
                results[(meth, call)] = res
        return results

    def random_dropout(self) -> bool:
        """Whether the program has a dropout of p > 0 (random in train mode)."""
        return bool(re.search(r"Dropout\(0\.[1-9]|dropout\(\w+, 0\.[1-9]", self.prog["source"]))

    def compare_runs(self, ref, out, grad, first_only=False) -> Optional[str]:
        tol = TOLERANCE[self.prog["dtype"]]
        gtol = GRAD_TOLERANCE[self.prog["dtype"]]
        for key, (rflat, rin, rgrads) in ref.items():
            if first_only and key[1] > 0:
                continue
            if key not in out:
                return f"{key[0]}: missing from the fused module"
            oflat, oin, ograds = out[key]
            where = f"{key[0]} call {key[1] + 1}"
            if [k for k, _ in rflat] != [k for k, _ in oflat]:
                return f"{where}: output structure {[k for k, _ in rflat]} != {[k for k, _ in oflat]}"
            for (k, r), (_, o) in zip(rflat, oflat):
                err = _compare(f"{where} output{k}", r, o, tol)
                if err:
                    return err
            err = _compare(f"{where} input after the call", rin, oin, tol)
            if err:
                return err
            if self.prog["special"] != "none":
                continue  # non-finite input: gradients not compared (see the module's docstring)
            for name in rgrads:
                err = _compare(f"{where} grad of {name}", rgrads[name], ograds.get(name), gtol)
                if err:
                    return err
        return None

    def closer_to_float64(self, ref, out, v, first_only) -> bool:
        """Half precision, deterministic programs, finite input: whether every output, input after
        the call and gradient of the fused module is within F64_FACTOR of the reference's own error
        against the same module (its weights and input as rounded) computed in float64 in eager mode
        (see HALF_F64_FALLBACK). Programs that write to their input qualify: every call, here too,
        gets a fresh copy of it (seed 1 programs 14736, 15560)."""
        if self.prog["dtype"] not in ("float16", "bfloat16") or self.prog["special"] != "none" or \
                (v["mode"] == "train" and self.random_dropout()):
            return False
        m = self.model(fresh=True).double()
        m.train(v["mode"] == "train")
        params = {k: p for k, p in m.named_parameters() if p.requires_grad}

        def rel(a, b, exact):
            return float((a.detach().double().cpu() - exact).norm() / max(exact.norm().item(), 1e-300))
        for (meth, call), (rflat, rin, rgrads) in ref.items():
            if first_only and call > 0:
                continue
            oflat, oin, ograds = out[(meth, call)]
            leaf = self.x.double().clone().requires_grad_(v["grad"])
            inp = leaf.clone() if v["grad"] else leaf
            with torch.set_grad_enabled(v["grad"]):
                dflat = _flatten(getattr(m, meth)(inp))
            pairs = [(r, o, d) for (_, r), (_, o), (_, d) in zip(rflat, oflat, dflat)] + [(rin, oin, inp)]
            if v["grad"] and rgrads:
                diff = [t for _, t in dflat if isinstance(t, torch.Tensor) and t.requires_grad]
                loss = weighted_sum(diff)
                got = dict(zip(["input"] + list(params), torch.autograd.grad(
                    loss, [leaf] + list(params.values()), allow_unused=True)))
                pairs += [(rgrads[k], ograds.get(k), got.get(k)) for k in rgrads]
            for r, o, d in pairs:
                if not isinstance(r, torch.Tensor) or not isinstance(o, torch.Tensor) or not isinstance(d, torch.Tensor):
                    if _compare("", r, o, 0.0):
                        return False
                    continue
                if r.shape != d.shape or not d.isfinite().all():
                    return False
                d = d.detach().double().cpu()
                if rel(o, d, d) > F64_FACTOR * rel(r, d, d) + TOLERANCE[self.prog["dtype"]]:
                    return False
        return True

    def reference_unstable(self, ref) -> bool:
        """Whether a method's second (optimised) call of the reference gave other outputs, or left
        another input, than its first, on the same input."""
        tol = TOLERANCE[self.prog["dtype"]]
        for (meth, call), (flat, inp, _) in ref.items():
            if call == 0 or (meth, 0) not in ref:
                continue
            first_flat, first_inp, _ = ref[(meth, 0)]
            if [k for k, _ in flat] != [k for k, _ in first_flat]:
                return True
            for (k, a), (_, b) in zip(first_flat, flat):
                if _compare(k, a, b, tol):
                    return True
            if _compare("input", first_inp, inp, tol):
                return True
        return False

    def methods_of(self, m):
        names = set(m._c._method_names())
        return [meth for meth in self.prog["methods"] if meth in names]

    def save_load(self, m, tag):
        path = self.tmp / f"{tag}.pt"
        torch.jit.save(m, str(path))
        return torch.jit.load(str(path), map_location=self.device)

    def writes_input(self) -> bool:
        """Whether forward may write to its input in place (x.op_(), an in-place ReLU of x)."""
        src = self.prog["source"]
        inplace_mods = set(re.findall(r"self\.(\w+) = nn\.ReLU\(inplace=True\)", src))
        return bool(re.search(r"\bx\.\w+_\(|\(x, inplace=True\)", src)) or any(
            f"self.{m}(x)" in src for m in inplace_mods)

    def run_variant(self, v) -> Tuple[str, str]:
        """(status, detail): ok, mismatch, error (ours raised), ref-failed."""
        stage = "reference"
        if v["grad"] and self.writes_input():
            v = dict(v, grad=False)  # see the docstring's exclusions
        try:
            sm = self.base(v["frontend"], v["mode"])
            sm.train(v["mode"] == "train")
            other = [meth for meth in self.prog["methods"] if meth != "forward"]
            # Reference: the same pipeline without the fusion.
            try:
                if v["how"] in ("file", "cli"):
                    src = self.tmp / "src.pt"
                    torch.jit.save(sm, str(src))
                    ref = torch.jit.load(str(src), map_location=self.device)
                    ref.train(v["mode"] == "train")
                else:
                    ref = sm
                if v["freeze"]:
                    ref = torch.jit.freeze(ref.eval(), preserved_attrs=other)
                if v["ofi"]:
                    ref = torch.jit.optimize_for_inference(ref, other_methods=other)
                if v["save"]:
                    ref = self.save_load(ref, "ref")
                ref_methods = self.methods_of(ref)
                ref_out = self.run_model(ref, v["grad"], ref_methods)
            except RefFailed:
                raise
            except Exception as e:
                raise RefFailed(f"{type(e).__name__}: {_last_line(e)}")
            stage = "fuse"
            report = None
            if v["how"] == "api":
                fused, report = hypatia_ops.fuse(sm, freeze=v["freeze"], mlp=v["mlp"], return_report=True)
            elif v["how"] == "file":
                dst = self.tmp / "dst.pt"
                report = hypatia_ops.fuse_file(self.tmp / "src.pt", dst, freeze=v["freeze"], mlp=v["mlp"])
                fused = torch.jit.load(str(dst), map_location=self.device)
            elif v["how"] == "cli":
                dst, rep = self.tmp / "dst.pt", self.tmp / "report.json"
                cmd = [str(BUILD / "hypatia-fuse")] + (["--freeze"] if v["freeze"] else []) + \
                      ([] if v["mlp"] else ["--no-mlp"]) + ["--report", str(rep), str(self.tmp / "src.pt"), str(dst)]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                if proc.returncode != 0:
                    return "error", f"hypatia-fuse exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
                report = hypatia_ops.FusionReport.from_json(rep.read_text())
                fused = torch.jit.load(str(dst), map_location=self.device)
            else:  # auto: the same module with the executor's optimisations (the post pass fuses)
                fused = ref
            if v["how"] != "auto":
                fused.train(v["mode"] == "train") if hasattr(fused, "training") and not v["freeze"] else None
                stage = "report"
                err = check_report(fused, report, names=v["how"] == "api")
                if err:
                    return "mismatch", err
                if set(self.methods_of(fused)) != set(ref_methods):
                    return "mismatch", f"methods {sorted(self.methods_of(fused))} fused, {sorted(ref_methods)} in the reference"
                stage = "optimize_for_inference"
                if v["ofi"]:
                    fused = torch.jit.optimize_for_inference(fused, other_methods=other)
                stage = "save/load"
                if v["save"]:
                    fused = self.save_load(fused, "fused")
                stage = "run"
                fused_out = self.run_model(fused, v["grad"], ref_methods)
            else:
                stage = "run"
                with torch.jit.optimized_execution(False):
                    ref_out = self.run_model(ref, v["grad"], ref_methods)
                self.run_model(fused, v["grad"], ref_methods)  # profiling runs
                fused_out = self.run_model(fused, v["grad"], ref_methods)
            # Train mode with gradients: the optimised runs put dropout into autodiff subgraphs
            # (another RNG routine, other masks) where its neighbours allow: the fused graph's
            # differ. Only the first (profiling) runs are compared then.
            first_only = v["mode"] == "train" and v["grad"] and self.random_dropout()
            # A deterministic program whose reference gives another result in its optimised call
            # than in its first: the reference is no oracle for that call (see the docstring's
            # exclusions: dropout returning its input); the first calls are still compared.
            unstable = not (v["mode"] == "train" and self.random_dropout()) and self.reference_unstable(ref_out)
            err = self.compare_runs(ref_out, fused_out, v["grad"], first_only or unstable)
            if err and self.closer_to_float64(ref_out, fused_out, v, first_only or unstable):
                return "ok", f"half-precision reference less accurate: {err}"
            if err:
                return "mismatch", err
            if unstable:
                return "pytorch-unstable", "the reference's optimised call differs from its first call"
            if v["how"] == "auto":
                g = torch.jit.last_executed_optimized_graph()
                if any(n.kind() in HYPATIA_KINDS for n in _nodes(g)):
                    return "ok", "auto-fused"
            elif report is not None and (report.linear_relu or report.mlp):
                return "ok", "fused"
            return "ok", ""
        except RefFailed as e:
            return "ref-failed", str(e)
        except Exception as e:
            return "error", f"{stage}: {type(e).__name__}: {_last_line(e)}"


def worker_main(device: str, auto: bool):
    """Reads tasks (JSON lines) on stdin, writes messages on the original stdout; whatever the
    library prints goes to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import faulthandler
    faulthandler.enable()  # a fatal signal (SIGSEGV, SIGFPE, ...) leaves its Python stack in the crash line
    _worker_imports()
    threads = int(os.environ.get("FUZZ_THREADS", "1"))
    torch.set_num_threads(threads)
    if auto:
        # The TensorExpr fuser stays on: with it off, the profiling executor runs no custom post
        # pass, and auto-fusion fuses nothing. Where NNC's fusion of the optimised runs alone
        # changes results (CUDA, half precision), recheck_auto tells it apart.
        hypatia_ops.enable_auto_fusion()
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-worker-"))

    def emit(msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    emit({"ready": True})
    for line in sys.stdin:
        task = json.loads(line)
        prog = task["program"]
        results = []
        try:
            runner = Runner(prog, device, tmp, emit)
            try:
                runner.eager_check()
            except Exception as e:
                emit({"invalid": f"{type(e).__name__}: {e}"[:300]})
                continue
            for name in task["variants"]:
                emit({"at": name})
                status, detail = runner.run_variant(parse_variant(name))
                results.append([name, status, detail])
        except Exception:
            emit({"invalid": traceback.format_exc()[-500:]})
            continue
        emit({"results": results})


# =================================================================================================
# The parent: worker processes, scheduling, shrinking, the log
# =================================================================================================

class Worker:
    def __init__(self, device: str, auto: bool):
        self.device, self.auto = device, auto
        self.proc = None
        self.served = 0
        self.errfile = None

    def start(self):
        self.errfile = tempfile.TemporaryFile(mode="w+b")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        args = [sys.executable, str(Path(__file__).resolve()), "--worker", "--device", self.device]
        if self.auto:
            args.append("--auto")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errfile,
                                     env=env, bufsize=0)
        self.buf = b""
        self.eof = False
        self.served = 0
        msg = self._read(TASK_TIMEOUT_S)
        if not msg or not msg.get("ready"):
            raise RuntimeError(f"fuzz worker did not start: {self.stderr_tail()}")

    def stderr_tail(self, n=800):
        if not self.errfile:
            return ""
        self.errfile.seek(0)
        return self.errfile.read().decode(errors="replace")[-n:]

    def stop(self):
        if self.proc:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kill(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _read(self, timeout):
        """The worker's next message, None at EOF (self.eof set) or after `timeout` seconds. Reads the pipe
        itself: a buffered readline could take two messages from the pipe and leave select()
        waiting for the second."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                self.eof = True
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def run(self, program, variants) -> Dict[str, Any]:
        """{'results': [...]} or {'invalid': ...} or {'crash': ..., 'at': variant}."""
        if self.proc is None or self.served >= WORKER_RECYCLE:
            self.stop()
            self.start()
        self.served += 1
        data = memoryview((json.dumps({"program": program, "variants": variants}) + "\n").encode())
        while data:
            data = data[self.proc.stdin.write(data):]
        at = None
        deadline = time.monotonic() + TASK_TIMEOUT_S
        while True:
            msg = self._read(max(0.0, deadline - time.monotonic()))
            if msg is None:
                # At EOF the worker is exiting: wait for its status (poll() at once could still see
                # it running and call a worker killed by a signal "hung").
                try:
                    rc = self.proc.wait(timeout=30) if self.eof else self.proc.poll()
                except subprocess.TimeoutExpired:
                    rc = None
                why = f"worker died (exit {rc})" if rc is not None else f"worker hung for {TASK_TIMEOUT_S} s"
                self.kill()
                tail = self.stderr_tail(4000).strip().splitlines()
                fatal = [i for i, line in enumerate(tail) if line.startswith("Fatal Python error")]
                # faulthandler's report: the signal and the innermost Python frame (where it died)
                tail = tail[fatal[-1]:fatal[-1] + 4] if fatal else tail[-3:]
                tail = [line.strip() for line in tail if line.strip()][:3]
                return {"crash": why + (": " + " | ".join(tail) if tail else ""), "at": at}
            if "at" in msg:
                at = msg["at"]
            elif "results" in msg or "invalid" in msg:
                return msg


def outcome(res, variant=None):
    """The failures of a run: [(variant, kind, detail)], kind 'mismatch' or 'crash'."""
    if "crash" in res:
        return [(res.get("at") or "?", "crash", res["crash"])]
    if "invalid" in res:
        return []
    fails = []
    for name, status, detail in res["results"]:
        if status == "mismatch":
            fails.append((name, "mismatch", detail))
        elif status == "error":
            fails.append((name, "crash", detail))
    return fails


def recheck_auto(plain: Worker, program, res):
    """An auto-fusion variant that failed is run again in a worker without auto-fusion, where it
    compares PyTorch's optimised runs with its unoptimised ones alone: when that fails too, the
    failure is PyTorch's (status pytorch-unstable), not the post pass's."""
    if "results" not in res:
        return res
    results = []
    for name, status, detail in res["results"]:
        if status in ("mismatch", "error"):
            again = plain.run(program, [name])
            if any(st in ("mismatch", "error") for _, st, _ in again.get("results", [])):
                status, detail = "pytorch-unstable", f"{detail} (also without auto-fusion)"
        results.append([name, status, detail])
    return {"results": results}


def _chunks(source: str) -> List[Tuple[int, int]]:
    """(start, end) line ranges that can be deleted: a statement with its indented body (an `if`
    with its `else:` branch), a whole helper class."""
    lines = source.splitlines()
    indent = [len(l) - len(l.lstrip()) for l in lines]
    out = []
    for i, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith(("def ", "super()", "@", "else:", "class M(")):
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() and s.startswith("class ") or lines[j].strip() and (
                indent[j] > indent[i] or (lines[j].strip() == "else:" and indent[j] == indent[i]))):
            j += 1
        out.append((i, j))
    return out


def shrink(worker: Worker, program, variant: str, kind: str, budget_s: float = 120.0, plain: Optional[Worker] = None):
    """A smaller program failing the same way on `variant`."""
    deadline = time.monotonic() + budget_s

    def fails(p):
        res = worker.run(p, [variant])
        if plain is not None:
            res = recheck_auto(plain, p, res)
        return any(k == kind for _, k, _ in outcome(res))

    best = dict(program)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        # Delete classes first (whole), then statements, from the end.
        for start, end in reversed(_chunks(best["source"])):
            if time.monotonic() > deadline:
                break
            lines = best["source"].splitlines()
            if start >= len(lines):
                continue
            cand_lines = lines[:start] + lines[end:]
            body = "\n".join(cand_lines) + "\n"
            cand = dict(best, source=body)
            if fails(cand):
                best, changed = cand, True
        # A smaller input, float32, no NaN.
        for key, values in (("special", ["none"]), ("dtype", ["float32", "float64"]),):
            for value in values:
                if best[key] != value and time.monotonic() < deadline:
                    cand = dict(best, **{key: value})
                    if fails(cand):
                        best, changed = cand, True
                        break
        shape = best["shape"]
        for i in range(len(shape) - 1):
            if shape[i] > 1 and time.monotonic() < deadline:
                cand = dict(best, shape=shape[:i] + [1] + shape[i + 1:])
                if fails(cand):
                    best, changed = cand, True
                    shape = best["shape"]
    return best


def format_repro(program, variant, kind, detail) -> str:
    case = {k: program[k] for k in ("shape", "dtype", "methods", "special")}
    case["variant"] = variant
    return "\n".join([
        f"# shrunk program (seed {program['seed']}, program {program['index']}): {kind} in {variant}: {detail}",
        "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "",
        program["source"].rstrip(), "",
        f"CASE = {case!r}",
        "# check: tests/fuzz/fuzz_passes.py's check_program(SOURCE, CASE) (tests/python/test_fuzz_regressions.py)",
    ])


def check_program(source: str, case: Dict[str, Any], device: str = "cpu") -> List[Tuple[str, str, str]]:
    """In this process: runs `source` (defining class M) through case['variant'] (or every variant
    in case['variants']); returns [(variant, status, detail)] for the regression tests."""
    _worker_imports()
    prog = {"source": source, "shape": case["shape"], "dtype": case["dtype"], "methods": case.get("methods", ["forward"]),
            "special": case.get("special", "none"), "seed": "regression", "index": 0}
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(prog, device, Path(tmp))
        runner.eager_check()
        names = case.get("variants") or [case["variant"]]
        return [(name, *runner.run_variant(parse_variant(name))) for name in names]


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit = out.stdout.strip() + ("-dirty" if dirty else "")
            env = os.environ.get("HYPATIA_COMMIT")
            return commit + (f" (HYPATIA_COMMIT {env})" if env else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("HYPATIA_COMMIT", "unknown")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="index of the first program (split long runs)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--log", help="also write one line per program to this file")
    ap.add_argument("--cli-fraction", type=float, default=0.05, help="share of programs that run hypatia-fuse")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--auto", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.device, args.auto)
        return 0

    threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    os.environ.setdefault("FUZZ_THREADS", str(threads))
    print(f"fuzz_passes: commit {git_commit()}, seed {args.seed}, programs {args.start}..{args.start + args.count - 1} "
          f"(count {args.count}), device {args.device}, jobs {args.jobs}, "
          f"{os.environ['FUZZ_THREADS']} thread(s) per job", flush=True)
    log = open(args.log, "w") if args.log else None
    lock = threading.Lock()
    coverage: collections.Counter = collections.Counter()
    features: collections.Counter = collections.Counter()
    statuses: collections.Counter = collections.Counter()
    failures: List[Tuple[int, str, str, str]] = []
    crashes = mismatches = 0
    done = 0
    next_index = [args.start]
    end = args.start + args.count
    t0 = time.monotonic()

    def record(index, program, fails, results):
        nonlocal crashes, mismatches, done
        with lock:
            done += 1
            for name, status, detail in results:
                statuses[status] += 1
                if status == "ok":
                    v = parse_variant(name)
                    for k in ("frontend", "mode", "how"):
                        coverage[f"{k}={v[k]}"] += 1
                    for k in ("freeze", "ofi", "save", "grad"):
                        coverage[f"{k}"] += v[k]
                    coverage["no-mlp"] += not v["mlp"]
                    if detail in ("fused", "auto-fused"):
                        coverage[f"fused-by-{v['how']}"] += 1
            features.update(program["features"])
            kinds = {k for _, k, _ in fails}
            mismatches += "mismatch" in kinds
            crashes += "crash" in kinds
            line = f"#{index} {program['dtype']} {tuple(program['shape'])}: " + (
                "; ".join(f"{k.upper()} {v}: {d}" for v, k, d in fails) if fails else
                " ".join(f"{n}={s}" for n, s, _ in results))
            if log:
                log.write(line + "\n")
                log.flush()
            if fails:
                print(line, flush=True)
            elif not args.quiet and done % 100 == 0:
                rate = done / (time.monotonic() - t0)
                print(f"... {done} programs, {mismatches} mismatches, {crashes} crashes ({rate:.2f} programs/s)",
                      flush=True)

    def slot():
        plain, auto = Worker(args.device, False), Worker(args.device, True)
        try:
            while True:
                with lock:
                    if next_index[0] >= end:
                        return
                    index = next_index[0]
                    next_index[0] += 1
                program = generate(args.seed, index)
                variants = [variant_name(v) for v in choose_variants(args.seed, index, args.cli_fraction)]
                results, fails = [], []
                for worker, names in ((plain, [n for n in variants if "/auto" not in n]),
                                      (auto, [n for n in variants if "/auto" in n])):
                    if not names:
                        continue
                    res = worker.run(program, names)
                    if "invalid" in res:
                        with lock:
                            statuses["invalid"] += 1
                        continue
                    if worker is auto:
                        res = recheck_auto(plain, program, res)
                    f = outcome(res)
                    fails += f
                    results += res.get("results", [])
                    if f and not args.no_shrink:
                        variant, kind, detail = f[0]
                        if variant != "?":
                            small = shrink(worker, program, variant, kind, plain=plain if worker is auto else None)
                            with lock:
                                print(format_repro(small, variant, kind, detail), flush=True)
                        else:
                            with lock:
                                print(format_repro(program, variants[0], kind, detail), flush=True)
                record(index, program, fails, results)
        finally:
            plain.stop()
            auto.stop()

    threads_ = [threading.Thread(target=slot) for _ in range(max(1, args.jobs))]
    for t in threads_:
        t.start()
    for t in threads_:
        t.join()
    elapsed = time.monotonic() - t0
    print("coverage (variants passed): " + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items())))
    print("statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    print("features: " + ", ".join(f"{k} {v}" for k, v in sorted(features.items())))
    print(f"time: {elapsed:.1f} s, {done / elapsed:.2f} programs/s ({done / elapsed / max(1, args.jobs):.2f} per job)")
    print(f"fuzz: {done} programs, {mismatches} mismatches, {crashes} crashes", flush=True)
    if log:
        log.close()
    # A slot whose worker could not start ends early (its traceback above): a short run is a failed run.
    if done < args.count:
        print(f"fuzz_passes: error: {args.count - done} of {args.count} programs did not run", file=sys.stderr, flush=True)
        return 1
    return 1 if mismatches or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
