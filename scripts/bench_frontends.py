#!/usr/bin/env python3
"""Benchmarks the ways a model reaches the hypatia ops, side by side in one process, forward and
forward+backward: eager PyTorch, torch.compile (default), torch.compile(backend="hypatia"), the same
model calling the ops by hand in eager mode and compiled, AOTInductor packages of the exported
model unfused and fused (hypatia_ops.fuse_exported; inference only), and TorchScript fused.

`ops_dynamo` and `ops_aot` split the by-hand module's compiled overhead between Dynamo,
AOTAutograd and Inductor's wrapper (ops -> ops_dynamo -> ops_aot -> ops_compile).

Rows: the bundled models (models/reference_models.py), the transformer feed-forward block at
d=1024 with a 4x hidden layer, the narrow MLP of the op benchmark (64 wide, 4 layers) and the same
MLP on 16 rows, where every competitor is bound by host time. bfloat16 on CUDA, float32 on the CPU;
models in eval mode (dropout is the identity, so that every competitor computes the same thing;
fwd+bwd takes the gradients of the input and every parameter). Each competitor is first checked
against a float64 reference (bench_ops.py's bars; gradients: see GRAD_FLIP_BAR), then timed with bench_ops.py's helpers (median
of interleaved rounds; on CUDA, events around bursts of back-to-back calls).

Writes DIR/frontends.json, DIR/frontends.md and DIR/frontends.png; --profile also writes
DIR/frontends_profile.txt (torch.profiler tables of the by-hand module eager and compiled, and of
backend="hypatia": where a compiled module's time goes). --merge FILE keeps the rows of an earlier
run's frontends.json for the models not run now (to split a run over several calls).

    python scripts/bench_frontends.py --device cpu --out docs/perf/cpu --threads 2
    python scripts/bench_frontends.py --device cuda --models ffn_1024,narrow_mlp_64x4 --profile

Exit status 1 when any competitor failed its correctness check.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "models"))
import bench_ops  # noqa: E402  (loads the library through hypatia_ops)
import hypatia_ops  # noqa: E402
import reference_models as refm  # noqa: E402

# name -> what it is, in the tables' order; eager first
COMPETITORS = {
    "eager": "the model in eager PyTorch",
    "compile": "torch.compile(model), Inductor's defaults",
    "hypatia": 'torch.compile(model, backend="hypatia")',
    "ops": "the same model calling the ops by hand, eager",
    "ops_compile": "that by-hand module under torch.compile (default backend)",
    "ops_dynamo": 'the by-hand module under torch.compile(backend="eager"): Dynamo alone',
    "ops_aot": 'the by-hand module under torch.compile(backend="aot_eager"): Dynamo and AOTAutograd',
    "aoti": "AOTInductor package of torch.export(model) (inference only)",
    "aoti_fused": "AOTInductor package of fuse_exported(torch.export(model)) (inference only)",
    "jit_fused": "TorchScript fused by hypatia_ops.fuse (frozen for fwd)",
}
INFERENCE_ONLY = {"aoti", "aoti_fused"}
# Gradient bar of a model row besides bench_ops.py's: a ReLU whose input rounds across zero in one
# implementation and not in another flips one unit's gradient, and on a model of few rows one flip
# weighs more than on the op benchmark's: vgg_head, 1024 float32 rows, one flip (an input of 7.9e-8
# in float64 that the fused forward rounded to <= 0) put every fused competitor's gradients 3.4e-3
# off float64, eager's 2.5e-7. So float32 rows take bench_ops.py's sanity bar for eager.
GRAD_FLIP_BAR = {"float32": bench_ops.GRAD_EAGER_SANITY["float32"], "bfloat16": bench_ops.GRAD_TOLERANCE["bfloat16"]}


@dataclass(frozen=True)
class Spec:
    build: Callable[[], nn.Module]
    in_features: int
    rows: dict  # device -> rows
    note: str


def chain_64x4():
    return refm.narrow_mlp(in_features=64, width=64, depth=3, out_features=64)


MODELS = {
    "mlp_classifier": Spec(lambda: refm.build("mlp_classifier"), 784, {"cuda": 8192, "cpu": 256},
                           "784-2048-2048-10"),
    "transformer_ffn": Spec(lambda: refm.build("transformer_ffn"), 256, {"cuda": 16384, "cpu": 2048},
                            "LN -> 256-1024-256 + residual"),
    "narrow_mlp": Spec(lambda: refm.build("narrow_mlp"), 63, {"cuda": 262144, "cpu": 16384},
                       "63-64x8-4 (NeRF-style)"),
    "vgg_head": Spec(lambda: refm.build("vgg_head"), 1024, {"cuda": 8192, "cpu": 1024},
                     "1024-512-512-10, eval dropout"),
    "ffn_1024": Spec(lambda: refm.TransformerFFN(1024, 4096).eval(), 1024, {"cuda": 8192, "cpu": 256},
                     "LN -> 1024-4096-1024 + residual"),
    "narrow_mlp_64x4": Spec(lambda: chain_64x4().eval(), 64, {"cuda": 262144, "cpu": 65536},
                            "64-64-64-64-64 (the op benchmark's narrow MLP)"),
    "tiny_mlp": Spec(lambda: chain_64x4().eval(), 64, {"cuda": 16, "cpu": 16},
                     "64-64-64-64-64 on 16 rows: host-bound"),
}
NARROW_ROWS = ("narrow_mlp", "narrow_mlp_64x4")  # goal: hypatia >= 1.3x torch.compile default


class OpsChain(nn.Module):
    """A Linear/ReLU(/eval Dropout) Sequential calling hypatia::fused_mlp by hand (its parameters)."""

    def __init__(self, seq: nn.Sequential):
        super().__init__()
        self.linears = nn.ModuleList(m for m in seq if isinstance(m, nn.Linear))
        self.relu_last = isinstance([m for m in seq if not isinstance(m, nn.Dropout)][-1], nn.ReLU)

    def forward(self, x):
        return hypatia_ops.fused_mlp(x, [m.weight for m in self.linears], [m.bias for m in self.linears],
                                     self.relu_last)


class OpsFFN(nn.Module):
    """TransformerFFN calling hypatia::fused_mlp by hand: x + fused_mlp(LN(x))."""

    def __init__(self, ffn: refm.TransformerFFN):
        super().__init__()
        self.ffn = ffn

    def forward(self, x):
        f = self.ffn
        return x + hypatia_ops.fused_mlp(f.norm(x), [f.fc1.weight, f.fc2.weight], [f.fc1.bias, f.fc2.bias])


def by_hand(model: nn.Module) -> nn.Module:
    return OpsFFN(model) if isinstance(model, refm.TransformerFFN) else OpsChain(model)


class PackageNotLoadable(RuntimeError):
    """The machine, not the library: its AOTInductor packages cannot be loaded by a Python process."""


def aoti_runner(model, x, fused: bool, workdir: Path):
    """(callable, seconds to export and package) for an AOTInductor package of `model` on x's shape."""
    t = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
        if fused:
            ep = hypatia_ops.fuse_exported(ep)
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(workdir / f"{'fused' if fused else 'unfused'}_{os.getpid()}_{time.monotonic_ns()}.pt2"))
    if hypatia_ops.export.package_links_libstdcxx_statically(path):  # would crash this process
        raise PackageNotLoadable("Inductor linked libstdc++ into the package here; Python cannot load it (docs/compile.md)")
    runner = torch._inductor.aoti_load_package(path)
    return runner, time.perf_counter() - t


def jit_fused(model, mode):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*TorchScript.*")
        warnings.filterwarnings("ignore", message=".*torch.jit.*")
        scripted = torch.jit.script(model)
        return hypatia_ops.fuse(scripted, freeze=mode == "fwd")


def reference(model, mode, x, gout):
    """float64: the output, or the gradients of x and every parameter."""
    ref_model = _double(model)
    xr = x.detach().double().requires_grad_(mode == "fwd+bwd")
    with torch.set_grad_enabled(mode == "fwd+bwd"):
        out = ref_model(xr)
    if mode == "fwd":
        return out
    return torch.autograd.grad(out, [xr] + list(ref_model.parameters()), gout.double())


def _double(model):
    return copy.deepcopy(model).double()


def check(mode, result, ref) -> float:
    if mode == "fwd":
        return bench_ops.rel_error(result, ref) if torch.isfinite(result).all() else float("inf")
    return max(bench_ops.rel_error(g, r) for g, r in zip(result, ref))


def step(fn, mode, params, sets):
    if mode == "fwd":
        def call(i):
            with torch.no_grad():
                return fn(sets[i][0])
    else:
        def call(i):
            x, gout = sets[i]
            return torch.autograd.grad(fn(x), [x] + params, gout)
    return call


def make_competitor(name, model, mode, x, workdir):
    """(fn, extra build seconds) for competitor `name`; compiles happen at the first call."""
    if name == "eager":
        return model, 0.0
    if name == "compile":
        return torch.compile(model, fullgraph=True), 0.0
    if name == "hypatia":
        return torch.compile(model, backend="hypatia", fullgraph=True), 0.0
    if name == "ops":
        return by_hand(model), 0.0
    if name == "ops_compile":
        return torch.compile(by_hand(model), fullgraph=True), 0.0
    if name in ("ops_dynamo", "ops_aot"):
        return torch.compile(by_hand(model), backend="eager" if name == "ops_dynamo" else "aot_eager", fullgraph=True), 0.0
    if name in ("aoti", "aoti_fused"):
        return aoti_runner(model, x, name == "aoti_fused", workdir)
    if name == "jit_fused":
        t = time.perf_counter()
        fn = jit_fused(model, mode)
        return fn, time.perf_counter() - t
    raise ValueError(name)


def run_row(args, name, spec, mode, dtype, workdir, budget, profile_lines):
    device = args.device
    rows = 64 if args.quick else spec.rows[device]
    torch.manual_seed(args.seed)
    model = spec.build().to(device=device, dtype=dtype).eval()
    params = list(model.parameters())
    for p in params:
        p.requires_grad_(mode == "fwd+bwd")
    n_sets = 1 if args.quick else args.input_sets
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    sets = []
    for _ in range(n_sets):
        x = torch.randn(rows, spec.in_features, device=device, generator=gen).to(dtype).requires_grad_(mode == "fwd+bwd")
        gout = torch.randn(rows, model(x[:1]).shape[-1], device=device, generator=gen).to(dtype) if mode == "fwd+bwd" else None
        sets.append((x, gout))
    ref = reference(model, mode, *sets[0])
    row = {"model": name, "note": spec.note, "rows": rows, "in_features": spec.in_features, "dtype": str(dtype).split(".")[-1],
           "mode": mode, "device": device, "threads": torch.get_num_threads(), "ms": {}, "relerr": {}, "first_call_s": {},
           "build_s": {}, "skipped": {}, "status": "ok", "fusion": None}
    dtype_key = row["dtype"]
    torch._dynamo.reset()  # each row compiles afresh (one code object would hit Dynamo's cache limit)
    timed = {}
    for comp in args.competitors:
        if mode == "fwd+bwd" and comp in INFERENCE_ONLY:
            row["skipped"][comp] = "inference only"
            continue
        try:
            fn, build_s = make_competitor(comp, model, mode, sets[0][0].detach(), workdir)
            call = step(fn, mode, params, sets)
            t = time.perf_counter()
            result = call(0)
            bench_ops.sync(device)
            row["first_call_s"][comp], row["build_s"][comp] = time.perf_counter() - t, build_s
            if comp == "hypatia":
                report = hypatia_ops.last_compile_report()
                row["fusion"] = {"linear_relu": report.linear_relu, "mlp": report.mlp, "mlp_layers": report.mlp_layers,
                                 "skipped": report.skipped}
            err = check(mode, result, ref)
            del result
            row["relerr"][comp] = err
            if mode == "fwd":
                bar = bench_ops.TOLERANCE[dtype_key]
            elif comp == "eager":
                bar = bench_ops.GRAD_EAGER_SANITY[dtype_key]
            else:
                bar = max(bench_ops.GRAD_TOLERANCE[dtype_key], GRAD_FLIP_BAR[dtype_key],
                          bench_ops.GRAD_VS_EAGER * row["relerr"].get("eager", 0.0))
            if not err <= bar:
                fail(row, f"{comp} rel. error {err:.2e} > {bar:.1e}")
                continue
            timed[comp] = (call, None)
        except Exception as e:  # a competitor that cannot run a row is recorded; hypatia's failure fails it
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if comp in ("hypatia", "ops", "ops_compile", "aoti_fused") and not isinstance(e, PackageNotLoadable):
                fail(row, f"{comp} raised {why}")
            else:
                row["skipped"][comp] = why
    for comp, (ms, reps, burst) in bench_ops.time_interleaved(timed, len(sets), device, budget).items():
        row["ms"][comp] = ms
    summarize(row)
    if args.profile:
        profile_lines += profile_row(row, {c: timed[c][0] for c in ("ops", "ops_compile", "hypatia") if c in timed}, device)
    del sets, ref, timed
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def fail(row, what):
    row["status"] = f"FAIL: {what}" if row["status"] == "ok" else f"{row['status']}; FAIL: {what}"
    print(f"!!! {row['model']} {row['mode']}: FAIL: {what}", file=sys.stderr, flush=True)


def profile_row(row, calls, device) -> list[str]:
    """Per competitor: host seconds to issue 10 calls against their wall time once the device is done
    (a call bound by host time shows them equal), the host-device synchronisations the calls made
    and allocator calls (a synchronising call cannot overlap its host time with the device's work), and the
    torch.profiler table (self time, top 25)."""
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    lines = []
    for comp, call in calls.items():
        for _ in range(3):
            call(0)
        bench_ops.sync(device)
        t = time.perf_counter()
        for _ in range(10):
            call(0)
        issued = time.perf_counter() - t
        bench_ops.sync(device)
        done = time.perf_counter() - t
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(10):
                call(0)
            bench_ops.sync(device)
        events = prof.key_averages()
        # cudaMalloc / cudaFree (the caching allocator growing or giving memory back) synchronise too
        syncs = {e.key: e.count for e in events
                 if any(k in e.key for k in ("Synchronize", "cudaMalloc", "cudaFree")) or ("Memcpy" in e.key and "DtoH" in e.key)}
        sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
        lines += [f"## {row['model']} {row['mode']} {comp} (10 calls)", "",
                  f"host {issued * 1e2:.3f} ms a call to issue, {done * 1e2:.3f} ms a call done; synchronisations in 10 "
                  f"calls and the final sync: {syncs or 'none'}", "", events.table(sort_by=sort, row_limit=25), ""]
    return lines


def summarize(row):
    ms = row["ms"]

    def ratio(a, b):
        return ms[a] / ms[b] if a in ms and b in ms else None

    best_base = min((ms[c] for c in ("eager", "compile") if c in ms), default=None)
    row["hypatia_vs_best_of_eager_compile"] = best_base / ms["hypatia"] if best_base and "hypatia" in ms else None
    row["hypatia_vs_compile"] = ratio("compile", "hypatia")
    row["hypatia_vs_eager"] = ratio("eager", "hypatia")
    row["ops_compile_vs_ops"] = ratio("ops", "ops_compile")  # >= 0.95: compiling keeps the ops' speed
    row["aoti_fused_vs_aoti"] = ratio("aoti", "aoti_fused")


def goals(rows) -> list[str]:
    lines = []
    for r in rows:
        where = f"{r['model']} {r['mode']}"
        if r["hypatia_vs_best_of_eager_compile"] is not None and r["hypatia_vs_best_of_eager_compile"] < 1.0:
            lines.append(f"{where}: hypatia {r['hypatia_vs_best_of_eager_compile']:.3f}x the better of eager and compile (goal >= 1.0)")
        if r["model"] in NARROW_ROWS and r["hypatia_vs_compile"] is not None and r["hypatia_vs_compile"] < 1.3:
            lines.append(f"{where}: hypatia {r['hypatia_vs_compile']:.3f}x compile (goal >= 1.3 on the narrow MLP)")
        if r["ops_compile_vs_ops"] is not None and r["ops_compile_vs_ops"] < 0.95:
            lines.append(f"{where}: the by-hand module compiled keeps {r['ops_compile_vs_ops']:.3f} of its eager speed (goal >= 0.95)")
    return lines


def markdown(meta, rows) -> str:
    fmt = bench_ops.fmt
    comps = [c for c in COMPETITORS if any(c in r["ms"] or c in r["skipped"] for r in rows)]
    lines = [f"# Hypatia front ends: {meta['device_name']}", ""]
    for key in ("date_utc", "device", "cpu_model", "threads", "torch", "cuda", "git_commit", "timing", "models", "merged_from", "note"):
        if meta[key] is not None:
            lines.append(f"- {key}: {meta[key]}")
    lines += ["", "Competitors:", ""] + [f"- `{c}`: {COMPETITORS[c]}" for c in comps] + [
        "", "Median ms per call. `hyp/best`: the better of eager and compile over hypatia; `hyp/compile`; "
        "`ops_c/ops`: the by-hand module's eager time over its compiled time (>= 0.95: compiling keeps the ops' "
        "speed); `aoti f/u`: unfused package over fused. > 1 is faster.", ""]
    notes = []
    for mode in bench_ops.MODES:
        group = [r for r in rows if r["mode"] == mode]
        if not group:
            continue
        head = ["model", "rows", "dtype"] + comps + ["hyp/best", "hyp/compile", "ops_c/ops", "aoti f/u", "fused"]
        lines += [f"## {mode}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in group:
            cells = [r["model"], str(r["rows"]), r["dtype"]]
            for c in comps:
                if c in r["ms"]:
                    cells.append(fmt(r["ms"][c]))
                elif c in r["skipped"] and r["skipped"][c] == "inference only":
                    cells.append("–")
                elif c in r["skipped"]:
                    notes.append(f"{r['model']} {mode}: {c} skipped: {r['skipped'][c]}")
                    cells.append(f"skip[{len(notes)}]")
                else:
                    cells.append("")
            if r["status"] != "ok":
                notes.append(f"{r['model']} {mode}: {r['status']}")
                cells[0] += f" [{len(notes)}]"
            f = r["fusion"]
            cells += [fmt(r["hypatia_vs_best_of_eager_compile"]), fmt(r["hypatia_vs_compile"]), fmt(r["ops_compile_vs_ops"]),
                      fmt(r["aoti_fused_vs_aoti"]),
                      f"{f['mlp']} mlp ({f['mlp_layers']} layers), {f['linear_relu']} pairs" if f else ""]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    missed = goals(rows)
    lines += ["## Goals", "", "Every row: hypatia >= 1.0x the better of eager and compile; narrow MLP rows: >= 1.3x "
              "compile; the by-hand module compiled >= 0.95x its eager speed.", ""]
    lines += ([f"- missed: {m}" for m in missed] if missed else ["- every goal met in this run"]) + [""]
    lines += ["First calls (s; compiles and autotuning included; AOTInductor: export + package build):", ""]
    for r in rows:
        first = ", ".join(f"{c} {r['first_call_s'][c] + r['build_s'].get(c, 0):.1f}" for c in r["first_call_s"])
        lines.append(f"- {r['model']} {r['mode']}: {first}")
    lines.append("")
    if notes:
        lines += ["Notes:", ""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)] + [""]
    return "\n".join(lines)


def chart(path, meta, rows) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"skipped: matplotlib not importable ({e})"
    modes = [m for m in bench_ops.MODES if any(r["mode"] == m for r in rows)]
    comps = [c for c in COMPETITORS if c != "eager" and any(c in r["ms"] for r in rows)]
    fig, axes = plt.subplots(1, len(modes), figsize=(7.5 * len(modes), 0.5 * max(len(rows) // len(modes), 1) * len(comps) / 3 + 2),
                             squeeze=False)
    for ax, mode in zip(axes[0], modes):
        group = [r for r in rows if r["mode"] == mode and "eager" in r["ms"]]
        height = 0.8 / max(len(comps), 1)
        for j, c in enumerate(comps):
            ys = [i + (j - (len(comps) - 1) / 2) * height for i in range(len(group))]
            vals = [r["ms"]["eager"] / r["ms"][c] if c in r["ms"] else 1.0 for r in group]
            ax.barh(ys, [v - 1 for v in vals], left=1.0, height=height, label=c)
        ax.set_xscale("log")
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(range(len(group)), [f"{r['model']} ({r['rows']})" for r in group], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("speed-up over eager (>1: faster)")
        ax.set_title(mode)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"hypatia front ends, {meta['device_name']}, torch {meta['torch']}, {meta['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "latest")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    p.add_argument("--modes", default=",".join(bench_ops.MODES), help="fwd, fwd+bwd or both (default)")
    p.add_argument("--competitors", default=",".join(COMPETITORS), help="comma-separated subset (eager is always run)")
    p.add_argument("--threads", type=int, help="CPU intra-op threads (default: torch's)")
    p.add_argument("--input-sets", type=int, default=4, help="inputs rotated between calls (default 4)")
    p.add_argument("--max-samples", type=int, help="most timed samples of a competitor (bench_ops.py's default)")
    p.add_argument("--quick", action="store_true", help="64 rows, few samples: a smoke run")
    p.add_argument("--profile", action="store_true", help="also write frontends_profile.txt")
    p.add_argument("--merge", type=Path, metavar="FILE", help="keep the rows of an earlier frontends.json for the models not run now")
    p.add_argument("--note", help="conditions of the run, written into the results (e.g. the machine's load)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    if args.merge and not args.merge.is_file():
        p.error(f"--merge: no file {args.merge}")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.competitors = ["eager"] + [c.strip() for c in args.competitors.split(",") if c.strip() and c.strip() != "eager"]
    for what, given, known in (("--models", args.models, MODELS), ("--modes", args.modes, bench_ops.MODES),
                               ("--competitors", args.competitors, COMPETITORS)):
        if set(given) - set(known):
            p.error(f"{what}: unknown {sorted(set(given) - set(known))}, expected some of {list(known)}")
    return args


def git_commit():
    commit = os.environ.get("HYPATIA_COMMIT")  # where the tree was copied without its current .git
    if commit:
        return commit
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def write(args, rows, earlier, budget, t_start, commit, profile_lines) -> str:
    """Writes DIR/frontends.{json,md,png} (and the profile) for the rows so far, with the earlier
    run's rows of other models when merging; returns the markdown."""
    merged_from = None
    if earlier:
        kept = [r for r in earlier["rows"] if r["model"] not in args.models]
        merged_from = {"file": str(args.merge), "date_utc": earlier["metadata"]["date_utc"],
                       "git_commit": earlier["metadata"]["git_commit"], "models": sorted({r["model"] for r in kept})}
        rows = sorted(kept + rows, key=lambda r: (list(MODELS).index(r["model"]), bench_ops.MODES.index(r["mode"])))
    meta = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": args.device, "device_name": torch.cuda.get_device_name(0) if args.device == "cuda" else bench_ops.cpu_model(),
        "cpu_model": bench_ops.cpu_model(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(), "git_commit": commit,
        "quick": args.quick, "seed": args.seed, "input_sets": args.input_sets, "max_samples": budget.max_reps,
        "timing": (f"CUDA events around bursts of back-to-back calls (>= {bench_ops.BURST_S * 1e3:g} ms a burst)"
                   if args.device == "cuda" else "time.perf_counter around each call")
        + f", median of at most {budget.max_reps} samples in {bench_ops.ROUNDS} interleaved rounds",
        "models": "; ".join(f"{n}: {MODELS[n].note}" for n in MODELS if any(r["model"] == n for r in rows)),
        "merged_from": merged_from, "note": args.note,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    meta["chart"] = chart(args.out / "frontends.png", meta, rows)
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    (args.out / "frontends.json").write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1))
    table = markdown(meta, rows)
    (args.out / "frontends.md").write_text(table)
    if profile_lines:
        (args.out / "frontends_profile.txt").write_text("\n".join(profile_lines))
    return table


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    budget = bench_ops.timing_budget(args.device, args.quick, args.max_samples)
    earlier = json.loads(args.merge.read_text()) if args.merge else None
    t_start, commit = time.perf_counter(), git_commit()  # the code that runs is the code at the start
    rows, profile_lines = [], []
    with tempfile.TemporaryDirectory(prefix="hypatia_aoti_") as workdir:
        for name in args.models:
            for mode in args.modes:
                row = run_row(args, name, MODELS[name], mode, dtype, Path(workdir), budget, profile_lines)
                rows.append(row)
                times = " | ".join(f"{c} {bench_ops.fmt(v)}" for c, v in row["ms"].items())
                print(f"[{name} {mode}] {row['status']}: {times} ms", flush=True)
                table = write(args, rows, earlier, budget, t_start, commit, profile_lines)  # a cut-off run keeps its rows
    print(table)
    print(f"wrote {args.out}/frontends.json, frontends.md, frontends.png in {time.perf_counter() - t_start:.1f} s")
    if any(r["status"] != "ok" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
