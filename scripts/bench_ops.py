#!/usr/bin/env python3
"""Benchmarks the hypatia ops against PyTorch's own ways of computing the same thing, side by side.

One process, one device. For every row (op x shape x dtype x forward or forward+backward, and on
the CPU x thread count) each implementation is first checked against a float64 reference, then
timed (median of many calls, inputs rotated so that repeated calls don't just re-read the cache),
and its peak extra memory during one call is taken. Roofline ceilings (copy bandwidth, GEMM rate)
are measured in the same run and turned into a flop floor and a byte floor per row.

Writes DIR/results.json (every row and the metadata), DIR/results.md and DIR/speedup.png.

    python scripts/bench_ops.py                                # CUDA if present, else CPU
    python scripts/bench_ops.py --device cpu --threads 1,2
    python scripts/bench_ops.py --device cpu --quick --out /tmp/bench   # smoke run, seconds

Exit status 1 when any implementation failed its correctness check.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import hypatia_ops  # noqa: E402  (loads the library)

# TorchScript is deprecated but is one of the competitors.
warnings.filterwarnings("ignore", message=".*TorchScript.*")
warnings.filterwarnings("ignore", message=".*torch.jit.*")

BASELINE_NAME = "reference/h100-baseline-2026-11-22.json"

# name -> (torch dtype, TF32 matmuls allowed)
DTYPES = {
    "float32": (torch.float32, False),
    "tf32": (torch.float32, True),
    "bfloat16": (torch.bfloat16, False),
    "float16": (torch.float16, False),
}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Largest ||out - ref|| / ||ref|| against float64 that a row may show.
TOLERANCE = {"float32": 1e-4, "tf32": 3e-3, "bfloat16": 2e-2, "float16": 2e-2}
# Gradients: a ReLU whose input rounds across zero flips its mask, and the error that leaves
# grows like the square root of the forward error, and with depth (eager's own gradients are
# ~4e-4 off float64 for a 4096x1024->4096 fp32 Linear+ReLU, ~1e-1 for an 8-layer bf16 MLP).
# Where eager's rounding flips no mask, one flip of the implementation's own (a different but as
# accurate summation order) still moves the gradients far past the forward bar: 1.4e-4 to 1.7e-4
# for one flip in a 65536x64 fp32 MLP, whose forward was 1.5e-7 off float64 (eager 1.4e-7).
# So for fwd+bwd the bar is the larger of a gradient bar (float32: some ten such flips) and this
# many times eager's own error, and eager itself only has to stay under a sanity bar of about the
# square root of the forward bar.
GRAD_TOLERANCE = {"float32": 1e-3, "tf32": 3e-3, "bfloat16": 2e-2, "float16": 2e-2}
GRAD_VS_EAGER = 2.0
GRAD_EAGER_SANITY = {"float32": 1e-2, "tf32": 5e-2, "bfloat16": 0.25, "float16": 0.25}

# Linear -> ReLU shapes (M, K, N) and MLP shapes (M, D, H, layers: D -> H -> ... -> H -> D).
SHAPES = {
    "cuda": {
        "linear": [(256, 256, 512), (1024, 784, 2048), (8192, 4096, 4096), (32, 4096, 4096),
                   (65536, 64, 64), (16384, 1024, 4096)],
        "mlp": [(65536, 64, 64, 2), (65536, 64, 64, 8), (262144, 64, 64, 2), (262144, 64, 64, 8),
                (8192, 1024, 4096, 2), (16384, 4096, 16384, 2)],
        "named": ["dlrm-bottom", "dlrm-top", "mlp-256x4", "mlp-512x4", "mlp-1024x3", "mlp-1024x2"],
    },
    "cpu": {
        "linear": [(256, 256, 512), (1024, 784, 2048), (4096, 1024, 4096), (65536, 64, 64)],
        "mlp": [(65536, 64, 64, 2), (65536, 64, 64, 8), (8192, 1024, 4096, 2)],
        "memory_only": [(65536, 1024, 4096, 2)],
    },
    "quick": {
        "linear": [(256, 64, 96)],
        "named": ["tiny-ragged"],
        "mlp": [(512, 32, 64, 3)],
        "memory_only": [(2048, 64, 256, 2)],
    },
}
DEFAULT_DTYPES = {
    "cuda": {"linear": ["float32", "tf32", "bfloat16", "float16"], "mlp": ["float32", "bfloat16", "float16"]},
    "cpu": {"linear": ["float32", "bfloat16"], "mlp": ["float32", "bfloat16"]},
}
NARROW = 64  # fp16 MLP rows only for the narrow (D = H = 64) MLPs
# Named MLPs of medium width (issue 39): rows, every layer's width (input first), ReLU after the last.
# DLRM's bottom MLP reads its 13 dense features unpadded; its top MLP ends in one logit.
NAMED_MLPS = {
    "dlrm-bottom": (65536, (13, 512, 256, 64), True),
    "dlrm-top": (65536, (512, 1024, 1024, 512, 256, 1), False),
    "mlp-256x4": (65536, (256,) * 5, False),
    "mlp-512x4": (32768, (512,) * 5, False),
    "mlp-1024x3": (16384, (1024,) * 4, False),
    "mlp-1024x2": (8192, (1024,) * 3, False),
    "tiny-ragged": (300, (13, 48, 40, 1), True),  # --quick's stand-in: odd widths, relu_last
}
NAMED_DTYPES = {"cuda": ["bfloat16", "float16"], "cpu": []}
MODES = ("fwd", "fwd+bwd")
HYPATIA = "hypatia"
FWD_SAMPLE_ROWS = 4096  # forward rows are independent: check a spread of them against float64


@dataclass(frozen=True)
class Case:
    op: str  # "linear_relu" or "mlp"
    M: int
    K: int  # linear: in features; mlp: D (in and out width)
    N: int  # linear: out features; mlp: H (hidden width)
    layers: int
    dtype: str  # key of DTYPES
    memory_only: bool = False
    name: str = ""  # a NAMED_MLPS row: its widths come from there

    @classmethod
    def named(cls, name: str, dtype: str) -> "Case":
        M, widths, _ = NAMED_MLPS[name]
        return cls("mlp", M, widths[0], max(widths[1:-1], default=widths[-1]), len(widths) - 1, dtype, name=name)

    @property
    def relu_last(self) -> bool:
        return self.op == "linear_relu" or (bool(self.name) and NAMED_MLPS[self.name][2])

    @property
    def dims(self) -> list[int]:
        if self.name:
            return list(NAMED_MLPS[self.name][1])
        if self.op == "linear_relu":
            return [self.K, self.N]
        return [self.K] + [self.N] * (self.layers - 1) + [self.K]

    def shape(self) -> dict:
        if self.name:
            return {"M": self.M, "widths": tuple(self.dims), "relu_last": self.relu_last}
        if self.op == "linear_relu":
            return {"M": self.M, "K": self.K, "N": self.N}
        return {"M": self.M, "D": self.K, "H": self.N, "layers": self.layers}

    def label(self) -> str:
        if self.name:
            return self.name
        if self.op == "linear_relu":
            return f"{self.M}x{self.K}->{self.N}"
        return f"{self.M}x{self.K}-{self.N}x{self.layers}L"

    def param_elems(self) -> int:
        d = self.dims
        return sum(d[i] * d[i + 1] + d[i + 1] for i in range(len(d) - 1))

    def flops(self, mode: str) -> int:
        d = self.dims
        fwd = sum(2 * self.M * d[i] * d[i + 1] for i in range(len(d) - 1))
        return fwd * (3 if mode == "fwd+bwd" else 1)  # backward: one GEMM for dX, one for dW

    def bytes(self, mode: str) -> int:
        """Fewest bytes a call must move: inputs read once, outputs written once."""
        inputs = self.M * self.dims[0] + self.param_elems()
        out = self.M * self.dims[-1]
        elems = inputs + out if mode == "fwd" else 2 * inputs + out  # fwd+bwd: read x, params, grad_out; write their grads
        return elems * DTYPES[self.dtype][0].itemsize

    def floors_ms(self, mode: str, ceilings: dict) -> tuple[float, float]:
        """(flop floor, byte floor) in ms: flops at the GEMM rate, bytes at the copy rate of `ceilings`
        (measure_ceilings' gemm_GFLOPs per dtype and copy_GBps)."""
        return (self.flops(mode) / (ceilings["gemm_GFLOPs"][self.dtype] * 1e9) * 1e3,
                self.bytes(mode) / (ceilings["copy_GBps"] * 1e9) * 1e3)


# ----------------------------------------------------------------------------- implementations


def eager_fn(case: Case):
    relu_last = case.relu_last

    def eager(x, ws, bs):
        for i, (w, b) in enumerate(zip(ws, bs)):
            x = F.linear(x, w, b)
            if i + 1 < len(ws) or relu_last:
                x = F.relu(x)
        return x

    return eager


def hypatia_fn(case: Case):
    # the ops' overloads, as hypatia_ops calls them: an OpOverloadPacket resolves the overload on every call
    if case.op == "linear_relu":
        op = torch.ops.hypatia.fused_linear_relu.default
        return lambda x, ws, bs: op(x, ws[0], bs[0])
    op, relu_last = torch.ops.hypatia.fused_mlp.default, case.relu_last
    return lambda x, ws, bs: op(x, ws, bs, relu_last)


def addmm_act_fn(case: Case):
    return lambda x, ws, bs: torch._addmm_activation(bs[0], x, ws[0].t())


def compile_fn(case: Case):
    torch._dynamo.reset()  # a fresh cache per row: one code object would hit the recompile limit
    return torch.compile(eager_fn(case), dynamic=False)


def jit_fn(case: Case, ws, bs):
    """Frozen, inference-optimised TorchScript of the eager model; its weights are constants."""
    layers = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        linear = torch.nn.Linear(w.shape[1], w.shape[0], device=w.device, dtype=w.dtype)
        with torch.no_grad():
            linear.weight.copy_(w)
            linear.bias.copy_(b)
        layers.append(linear)
        if i + 1 < len(ws) or case.relu_last:
            layers.append(torch.nn.ReLU())
    module = torch.jit.script(torch.nn.Sequential(*layers).eval())
    module = torch.jit.optimize_for_inference(torch.jit.freeze(module))
    return lambda x, ws_, bs_: module(x)


def competitors(case: Case, device: str, mode: str, skip=()) -> list[str]:
    """Implementations of a row, eager first, hypatia last."""
    if case.memory_only:
        return ["eager", HYPATIA]
    names = ["eager"]
    if device == "cuda" and case.op == "linear_relu":
        names.append("addmm_act")
    names.append("compile")
    if device == "cpu" and mode == "fwd":
        names.append("jit")
    return [n for n in names if n not in skip] + [HYPATIA]


# ----------------------------------------------------------------------------- device helpers


def sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


@contextmanager
def num_threads(n):
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextmanager
def tf32(enabled: bool):
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def cache_bytes(device: str) -> int:
    """Last-level cache: L2 on a GPU, the largest CPU cache otherwise."""
    if device == "cuda":
        return torch.cuda.get_device_properties(0).L2_cache_size
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        sizes.append(int(text[:-1]) * (1024 if text.endswith("K") else 1024 * 1024) if text[-1] in "KM" else int(text))
    return max(sizes, default=32 << 20)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class CpuPeakMemory:
    """Peak extra resident memory of one call, read as VmHWM after resetting it through
    /proc/self/clear_refs. While measuring, glibc is made to mmap every block of 64 KiB or more
    and give it back on free, so memory reused from the heap can't hide an allocation; outside,
    it is held at the thresholds its own dynamic mode settles on (32 MiB mmap, 64 MiB trim), so
    timings don't depend on which rows ran before."""

    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3

    def __init__(self):
        self.reason = None
        try:
            self.libc = ctypes.CDLL("libc.so.6")
            Path("/proc/self/clear_refs").write_text("5")
            self._set(32 << 20, 64 << 20)
        except OSError as e:
            self.reason = f"peak RSS not measurable here: {e}"

    def _set(self, mmap_threshold: int, trim_threshold: int):
        self.libc.mallopt(self.M_MMAP_THRESHOLD, mmap_threshold)
        self.libc.mallopt(self.M_TRIM_THRESHOLD, trim_threshold)

    @staticmethod
    def _status_kib(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"{field} missing from /proc/self/status")

    def measure(self, call):
        """(MiB of resident memory above the level before the call at the call's peak, result)."""
        self._set(64 << 10, 128 << 10)
        try:
            gc.collect()
            # The library's kept blocks (ops/cpu/buffer_cache.h) given back too, or a call reusing
            # them would not count their pages.
            torch.ops.hypatia._empty_cpu_buffer_cache()
            self.libc.malloc_trim(0)
            Path("/proc/self/clear_refs").write_text("5")
            base = self._status_kib("VmRSS")
            result = call()
            peak = self._status_kib("VmHWM")
        finally:
            self._set(32 << 20, 64 << 20)
        return (peak - base) / 1024, result


def cuda_peak_memory(call):
    """(MiB the caching allocator handed out above the level before the call at its peak, result)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20, result


# ----------------------------------------------------------------------------- timing


@dataclass
class Budget:
    """Repetitions: about `target_s` of calls, clamped to [min_reps, max_reps]."""

    target_s: float
    min_reps: int
    max_reps: int
    warmup: int

    def reps(self, per_call_s: float) -> int:
        return max(self.min_reps, min(self.max_reps, int(self.target_s / max(per_call_s, 1e-7))))


def warm_up(call, n_sets: int, device: str, budget: Budget, per_call_s: float | None) -> float:
    """Seconds a call: `per_call_s` where a call already made took long enough (it was the warm-up),
    else the mean of budget.warmup calls made now."""
    if per_call_s is None or per_call_s < 0.25:
        t0 = time.perf_counter()
        for i in range(budget.warmup):
            call(i % n_sets)
        sync(device)
        per_call_s = (time.perf_counter() - t0) / max(budget.warmup, 1)
    return per_call_s


# CUDA: events go around bursts of back-to-back calls that last about this long, not around each
# call. Recording an event pair costs the host time, which a call bound by its own host time would
# be charged on top of it: on the lent H100, per-call events timed the narrow 2-layer MLP forward
# 12-26 us a call slower than bursts (docs/perf/experiments.md#cuda-events-around-bursts).
BURST_S = 5e-4
MAX_BURST = 64


def burst_size(per_call_s: float, device: str) -> int:
    """Calls per timed sample: enough to fill BURST_S on CUDA; 1 on the CPU (its timer costs ~0.1 us)."""
    if device != "cuda":
        return 1
    return max(1, min(MAX_BURST, math.ceil(BURST_S / max(per_call_s, 1e-7))))


def timed_run(call, first: int, count: int, device: str, burst: int = 1) -> list[float]:
    """ms per call of `count` samples, each `burst` calls call(first), call(first + 1), ... issued
    back to back. CUDA: a pair of events around each sample, so that a call bound by its host-side
    launch cost shows that cost (the GPU waits for it), and the sample's time over `burst`."""
    if device == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
        i = first
        for start, end in events:
            start.record()
            for _ in range(burst):
                call(i)
                i += 1
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / burst for start, end in events]
    times = []
    for i in range(first, first + count * burst, burst):
        t = time.perf_counter()
        for j in range(burst):
            call(i + j)
        times.append((time.perf_counter() - t) * 1e3 / burst)
    return times


def time_calls(call, n_sets: int, device: str, budget: Budget) -> float:
    """Median ms of call(i) with i cycling over the input sets, after warm-up."""
    per_call_s = warm_up(call, n_sets, device, budget, None)
    burst = burst_size(per_call_s, device)
    reps = budget.reps(per_call_s * burst)
    return statistics.median(timed_run(lambda i: call(i % n_sets), 0, reps, device, burst))


# Rounds in which the competitors of a row take turns. A full run's budgets take at least this many
# samples of each, one in every round (with 3, two of the five rounds of a long CPU row had none);
# --quick's take fewer.
ROUNDS = 5


# Most samples of a competitor in a full run. On the CPU short rows take up to this many single
# calls (about 0.5 s of them): with 30, the 0.4 ms linear 256x256->512 float32 forward at 2 threads
# ran 0.952-1.186x eager over 5 runs; with 400, 1.052-1.059x
# (docs/perf/experiments.md#cpu-samples-per-competitor).
CPU_MAX_SAMPLES = 400
CUDA_MAX_SAMPLES = 100


def timing_budget(device: str, quick: bool, max_samples: int | None = None) -> Budget:
    """Samples of each competitor of a row; max_samples overrides a full run's largest count."""
    if device == "cuda":
        return Budget(0.02, 3, 5, 1) if quick else Budget(0.15, ROUNDS, max_samples or CUDA_MAX_SAMPLES, 3)
    return Budget(0.02, 2, 3, 1) if quick else Budget(0.5, ROUNDS, max_samples or CPU_MAX_SAMPLES, 2)


def time_interleaved(timed: dict, n_sets: int, device: str, budget: Budget, rounds: int = ROUNDS) -> dict:
    """Median ms per call, samples and calls per sample of each competitor (inputs cycling over the
    sets), timed in rounds that take turns (A's samples, B's, ..., then A's again), so that a slow
    spell of the machine (a shared host, GPU clocks) falls on every competitor alike instead of on
    whichever ran then. `timed`: name -> (call, seconds of a call already made, which replaces the
    warm-up, or None)."""
    plan = {}
    for name, (call, per_call_s) in timed.items():
        per_call_s = warm_up(call, n_sets, device, budget, per_call_s)
        burst = burst_size(per_call_s, device)
        plan[name] = (budget.reps(per_call_s * burst), burst)
    times = {name: [] for name in timed}
    for r in range(rounds):
        for name, (call, _) in timed.items():
            reps, burst = plan[name]
            count = reps * (r + 1) // rounds - reps * r // rounds  # reps in all
            first = len(times[name]) * burst
            times[name] += timed_run(lambda i: call(i % n_sets), first, count, device, burst)
    return {name: (statistics.median(ts), len(ts), plan[name][1]) for name, ts in times.items()}


def measure_ceilings(device: str, dtypes: list[str], quick: bool, threads) -> dict:
    """Copy bandwidth (bytes read + written) and GEMM rate per dtype, measured here."""
    budget = Budget(0, 3, 3, 1) if quick else Budget(0, 10 if device == "cuda" else 3, 20, 2)
    with num_threads(threads):
        copy_bytes = (16 << 20) if quick else (1 << 30 if device == "cuda" else 256 << 20)
        src = torch.randn(copy_bytes // 4, device=device)
        dst = torch.empty_like(src)
        ms = time_calls(lambda i: dst.copy_(src), 1, device, budget)
        ceilings = {"copy_GBps": 2 * copy_bytes / ms / 1e6, "gemm_GFLOPs": {}}
        src = dst = None  # free before the GEMMs
        for name in dtypes:
            dtype, allow_tf32 = DTYPES[name]
            if device == "cuda":
                size = 512 if quick else 8192
            else:  # CPU bf16 GEMMs can be far slower than fp32 ones: keep that one smaller
                size = 256 if quick else (2048 if dtype == torch.float32 else 1024)
            a = torch.randn(size, size, device=device, dtype=dtype)
            b = torch.randn(size, size, device=device, dtype=dtype)
            with tf32(allow_tf32):
                ms = time_calls(lambda i: F.linear(a, b), 1, device, budget)
            ceilings["gemm_GFLOPs"][name] = 2 * size**3 / ms / 1e6
    return ceilings


# ----------------------------------------------------------------------------- one row


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    err = ((out.double() - ref).norm() / ref.norm()).item()
    return err if math.isfinite(err) else float("inf")


def make_set(case: Case, device: str, grad: bool, gen: torch.Generator, params=None):
    """One input set: x, weights, biases (random, scaled so activations stay O(1)), grad_out."""
    dtype = DTYPES[case.dtype][0]
    rand = lambda *shape: torch.randn(*shape, device=device, dtype=torch.float32, generator=gen)  # noqa: E731
    x = rand(case.M, case.dims[0]).to(dtype)
    if params is None:
        d = case.dims
        ws = [(rand(d[i + 1], d[i]) * math.sqrt(2.0 / d[i])).to(dtype) for i in range(len(d) - 1)]
        bs = [(rand(d[i + 1]) * 0.5).to(dtype) for i in range(len(d) - 1)]
    else:
        ws, bs = params
    gout = rand(case.M, case.dims[-1]).to(dtype) if grad else None
    if grad:
        x.requires_grad_(True)
        for p in ws + bs:
            p.requires_grad_(True)
    return x, ws, bs, gout


def n_input_sets(case: Case, mode: str, device: str) -> int:
    """Enough input sets that together they overflow the last-level cache twice (at most 256);
    on the CPU only x and grad_out rotate (the TorchScript competitor has its weights built in)."""
    elem = DTYPES[case.dtype][0].itemsize
    per_set = case.M * case.dims[0] + (case.M * case.dims[-1] if mode == "fwd+bwd" else 0)
    if device == "cuda":
        per_set += case.param_elems()
    per_set *= elem
    n = max(1, min(256, math.ceil(2 * cache_bytes(device) / per_set)))
    if device == "cuda":  # never let the rotation take more than a quarter of free memory
        n = max(1, min(n, int(torch.cuda.mem_get_info()[0] / 4 / per_set)))
    return n


def working_bytes(case: Case, mode: str, n_sets: int) -> int:
    """Rough device memory a row needs: its input sets plus, per call, activations and grads."""
    elem = DTYPES[case.dtype][0].itemsize
    acts = case.M * sum(case.dims[1:])
    per_call = 3 * acts + (2 * (case.M * case.dims[0] + case.param_elems()) if mode == "fwd+bwd" else 0)
    set_elems = case.M * (case.dims[0] + case.dims[-1]) + case.param_elems()
    return elem * (n_sets * set_elems + 2 * per_call)


def reference(case: Case, mode: str, x, ws, bs, gout):
    """float64 result: forward on a spread of rows (index, values), or every gradient."""
    fn = eager_fn(case)
    up = lambda t: t.detach().double()  # noqa: E731
    if mode == "fwd":
        rows = torch.unique(torch.linspace(0, case.M - 1, min(case.M, FWD_SAMPLE_ROWS), device=x.device).long())
        return rows, fn(up(x[rows]), [up(w) for w in ws], [up(b) for b in bs])
    leaves = [up(t).requires_grad_(True) for t in [x] + ws + bs]
    n = len(ws)
    out = fn(leaves[0], leaves[1:1 + n], leaves[1 + n:])
    return None, torch.autograd.grad(out, leaves, up(gout))


def tolerance(case: Case, mode: str, name: str, eager_err: float | None) -> float:
    if mode == "fwd":
        return TOLERANCE[case.dtype]
    if name == "eager" or eager_err is None:  # without eager's own error, only the sanity bar is fair
        return GRAD_EAGER_SANITY[case.dtype]
    return max(GRAD_TOLERANCE[case.dtype], GRAD_VS_EAGER * eager_err)


def check(case: Case, mode: str, result, ref) -> float:
    rows, expected = ref
    if mode == "fwd":
        if not torch.isfinite(result).all():
            return float("inf")  # NaN or Inf anywhere, sampled rows or not
        return rel_error(result[rows], expected)
    return max(rel_error(g, e) for g, e in zip(result, expected))


def step_fn(fn, mode: str, sets):
    """call(i): one forward (no autograd) or one forward + backward on input set i."""
    if mode == "fwd":
        def call(i):
            x, ws, bs, _ = sets[i]
            with torch.no_grad():
                return fn(x, ws, bs)
    else:
        def call(i):
            x, ws, bs, gout = sets[i]
            return torch.autograd.grad(fn(x, ws, bs), [x] + ws + bs, gout)
    return call


def estimate_cpu_call_s(fn, case: Case, mode: str, sets, cap_s: float) -> float:
    """Per-call seconds on the full rows, extrapolated from calls on a growing slice of rows
    (rows are independent): lets a row skip an implementation that would take minutes."""
    x, ws, bs, gout = sets[0]
    m = min(case.M, max(16, case.M // 256))
    while True:
        xs = x.detach()[:m].requires_grad_(x.requires_grad)
        slice_call = step_fn(fn, mode, [(xs, ws, bs, None if gout is None else gout[:m])])
        t = time.perf_counter()
        slice_call(0)
        t = time.perf_counter() - t
        estimate = t * case.M / m
        if estimate <= cap_s or m == case.M or t > cap_s / 8:
            return estimate
        m = min(case.M, m * 8)


class Runner:
    def __init__(self, args):
        self.args = args
        self.device = args.device
        self.quick = args.quick
        self.budget = timing_budget(self.device, self.quick, args.max_samples)
        self.cpu_memory = CpuPeakMemory() if self.device == "cpu" else None
        self.failures = []

    def peak_memory(self, row: dict, name: str, call):
        """Records the peak extra memory of call() in the row; returns call()'s result."""
        if self.device == "cuda":
            row["peak_mem_MiB"][name], result = cuda_peak_memory(call)
        elif self.cpu_memory.reason:
            row["skipped"][name + "_memory"] = self.cpu_memory.reason
            result = call()
        else:
            row["peak_mem_MiB"][name], result = self.cpu_memory.measure(call)
        return result

    def run_case(self, case: Case, mode: str, threads_list, ceilings, baseline) -> list[dict]:
        """All thread counts of one (case, mode): the inputs and the reference are shared."""
        device = self.device
        rows = [self.new_row(case, mode, t, ceilings, baseline) for t in threads_list]
        runnable = []
        for row, threads in zip(rows, threads_list):
            floor_s = row["flop_floor_ms"] / 1e3
            if not case.memory_only and floor_s > self.args.max_call_s:
                row["status"] = f"skipped: the flop floor alone is {floor_s:.1f} s a call (> --max-call-s {self.args.max_call_s})"
            else:
                runnable.append((row, threads))
        if not runnable:
            return rows
        n_sets = 1 if case.memory_only else n_input_sets(case, mode, device)
        if device == "cuda":
            need, free = working_bytes(case, mode, n_sets), torch.cuda.mem_get_info()[0]
            if need > 0.9 * free:
                for r in rows:
                    r["status"] = f"skipped: needs about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
                return rows
        try:
            gen = torch.Generator(device=device).manual_seed(self.args.seed)
            first = make_set(case, device, mode == "fwd+bwd", gen)
            shared = None if device == "cuda" else (first[1], first[2])
            sets = [first] + [make_set(case, device, mode == "fwd+bwd", gen, shared) for _ in range(n_sets - 1)]
            with num_threads(os.cpu_count() if device == "cpu" else None):
                ref = reference(case, mode, *sets[0])
        except torch.OutOfMemoryError as e:
            for r in rows:
                r["status"] = f"skipped: out of memory building inputs ({str(e).splitlines()[0]})"
            return rows
        for row, threads in runnable:
            with num_threads(threads), tf32(DTYPES[case.dtype][1]):
                self.run_row(row, case, mode, sets, ref, measure_memory=threads == threads_list[-1])
        del sets, ref
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        return rows

    def new_row(self, case: Case, mode: str, threads, ceilings, baseline) -> dict:
        flop_floor, byte_floor = case.floors_ms(mode, ceilings[threads] if self.device == "cpu" else ceilings[None])
        base = baseline.get((case.op, tuple(case.shape().values()), case.dtype, mode)) if baseline else None
        return {
            "op": case.op, "shape": case.shape(), "label": case.label(), "dtype": case.dtype,
            "tf32": DTYPES[case.dtype][1], "mode": mode, "device": self.device,
            "threads": threads if self.device == "cpu" else torch.get_num_threads(),
            "memory_only": case.memory_only, "status": "ok",
            "ms": {}, "relerr": {}, "tolerance": TOLERANCE[case.dtype], "peak_mem_MiB": {}, "skipped": {},
            "compile_s": None, "reps": {}, "calls_per_rep": {}, "input_sets": None,
            "flops": case.flops(mode), "bytes": case.bytes(mode),
            "flop_floor_ms": flop_floor, "byte_floor_ms": byte_floor, "floor_ms": max(flop_floor, byte_floor),
            "bound": "compute" if flop_floor >= byte_floor else "memory",
            "pct_of_floor": {}, "best_competitor": None, "hypatia_vs_best": None, "hypatia_vs_eager": None,
            "baseline_eager_ms": base, "eager_vs_baseline": None,
        }

    def run_row(self, row: dict, case: Case, mode: str, sets, ref, measure_memory: bool):
        device = self.device
        row["input_sets"] = len(sets)
        estimates = {}  # CPU: seconds a call, from a slice of rows
        timed = {}  # name -> (call, seconds of a call already made, or None)
        for name in competitors(case, device, mode, self.args.skip):
            try:
                if name == "eager":
                    fn = eager_fn(case)
                elif name == "addmm_act":
                    fn = addmm_act_fn(case)
                elif name == "compile":
                    fn = compile_fn(case)
                elif name == "jit":
                    fn = jit_fn(case, sets[0][1], sets[0][2])
                else:
                    fn = hypatia_fn(case)
                call = step_fn(fn, mode, sets)
                if device == "cpu" and not case.memory_only:
                    # compile's first call would compile for the slice's shape: eager stands in for it
                    if name == "compile" and "eager" in estimates:
                        estimate = estimates["eager"]
                    else:
                        probe = eager_fn(case) if name == "compile" else fn
                        estimate = estimate_cpu_call_s(probe, case, mode, sets, self.args.max_call_s)
                    # where eager runs, the others get twice its time, so that a row stays complete
                    limit = max(self.args.max_call_s, 2 * estimates.get("eager", 0.0))
                    estimates[name] = estimate
                    if estimate > limit:
                        row["skipped"][name] = (f"about {estimate:.0f} s a call, from calls on a slice of rows "
                                                f"(> {limit:.1f} s: --max-call-s or twice eager)")
                        continue
                if case.memory_only:  # one call, measured; libraries' one-time set-up stays out of it
                    step_fn(fn, mode, [(sets[0][0][:64], sets[0][1], sets[0][2], None)])(0)
                    result = self.peak_memory(row, name, lambda: call(0))
                else:
                    t = time.perf_counter()
                    result = call(0)
                    sync(device)
                    first_s = time.perf_counter() - t
                    if name == "compile":
                        row["compile_s"] = first_s
                err = check(case, mode, result, ref)
                del result
                row["relerr"][name] = err
                bar = tolerance(case, mode, name, row["relerr"].get("eager"))
                if name != "eager":
                    row["tolerance"] = bar
                if not err <= bar:
                    self.fail(row, case, mode, f"{name} rel. error {err:.2e} > {bar:.1e}")
                    continue
                if case.memory_only:
                    continue
                # a long first call on the CPU is warm-up enough; not on CUDA (handles, autotuning),
                # nor for compile or TorchScript, whose profiling executor optimises on later calls
                known = first_s if device == "cpu" and name not in ("compile", "jit") else None
                timed[name] = (call, known)  # timed below, all competitors interleaved
            except torch.OutOfMemoryError as e:
                row["skipped"][name] = f"out of memory: {str(e).splitlines()[0]}"
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
            except Exception as e:  # a competitor that can't run this row is recorded; hypatia fails it
                why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                if name == HYPATIA:
                    self.fail(row, case, mode, f"{name} raised {why}")
                else:
                    row["skipped"][name] = why
        if timed:
            for name, (ms, reps, burst) in time_interleaved(timed, len(sets), device, self.budget).items():
                row["ms"][name], row["reps"][name], row["calls_per_rep"][name] = ms, reps, burst
            if measure_memory:
                for name, (call, _) in timed.items():
                    self.peak_memory(row, name, lambda: call(0))
        summarize(row)

    def fail(self, row: dict, case: Case, mode: str, what: str):
        msg = f"FAIL: {what}"
        row["status"] = msg if row["status"] == "ok" else row["status"] + "; " + msg
        self.failures.append(f"{case.op} {case.label()} {case.dtype} {mode} t={row['threads']}: {msg}")
        print(f"!!! {self.failures[-1]}", file=sys.stderr, flush=True)


def summarize(row: dict):
    ms = row["ms"]
    for name, t in ms.items():
        row["pct_of_floor"][name] = 100 * row["floor_ms"] / t
    others = {k: v for k, v in ms.items() if k != HYPATIA}
    if others:
        row["best_competitor"] = min(others, key=others.get)
    if HYPATIA in ms and others:
        row["hypatia_vs_best"] = others[row["best_competitor"]] / ms[HYPATIA]
    if HYPATIA in ms and "eager" in ms:
        row["hypatia_vs_eager"] = ms["eager"] / ms[HYPATIA]
    if row["baseline_eager_ms"] and "eager" in ms:
        row["eager_vs_baseline"] = ms["eager"] / row["baseline_eager_ms"]


# ----------------------------------------------------------------------------- inputs and outputs


def load_baseline(path: Path | None) -> tuple[dict, str]:
    """(op, shape values, dtype, mode) -> eager ms of the reference run. Its fp32 rows are
    TF32-off GEMMs (their flop floors are at the fp32 rate); its MLP rows are D -> H -> D."""
    if path is None or not path.is_file():
        return {}, f"no baseline file ({path})"
    data = json.loads(path.read_text())
    table = {}
    for r in data["rows"]:
        if r["op"] == "linear_relu":
            shape = (r["M"], r["K"], r["N"])
        else:
            shape = (r["M"], r["D"], r["H"], 2)
        for mode, key in (("fwd", "eager_ms"), ("fwd+bwd", "eager_fwdbwd_ms")):
            if key in r:
                table[(r["op"], shape, r["dtype"], mode)] = r[key]
    return table, str(path)


def metadata(args, threads_list, ceilings, baseline_note, budget: Budget) -> dict:
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else cpu_model()
    # $HYPATIA_COMMIT: where the tree was copied without its current .git (the GPU machine)
    commit = os.environ.get("HYPATIA_COMMIT")
    try:
        commit = commit or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    lib = Path(hypatia_ops.library_path()).resolve()
    meta = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": args.device, "device_name": device_name, "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(), "threads": threads_list if args.device == "cpu" else [torch.get_num_threads()],
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "git_commit": commit, "library": str(lib.relative_to(ROOT)) if lib.is_relative_to(ROOT) else lib.name,
        "quick": args.quick, "seed": args.seed, "max_call_s": args.max_call_s, "skip": args.skip,
        "max_samples": budget.max_reps,
        "inductor_fx_graph_cache": bool(torch._inductor.config.fx_graph_cache),
        "timing": (f"CUDA events around bursts of back-to-back calls (>= {BURST_S * 1e3:g} ms a burst, at most "
                   f"{MAX_BURST} calls), ms per call of each burst" if args.device == "cuda"
                   else "time.perf_counter around each call") + f", median of at most {budget.max_reps} samples; competitors timed in {ROUNDS} interleaved rounds",
        "memory": ("torch.cuda.max_memory_allocated above the level before one call" if args.device == "cuda"
                   else "peak RSS (VmHWM after clear_refs) above the level before one call"),
        "baseline": baseline_note,
        "ceilings": {str(k): v for k, v in ceilings.items()},
    }
    if args.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        meta.update(sm_count=props.multi_processor_count, l2_MiB=props.L2_cache_size / 2**20,
                    gpu_memory_GiB=round(props.total_memory / 2**30, 1))
    return meta


def fmt(v, digits=3):
    if v is None:
        return ""
    if v == 0 or abs(v) >= 10 ** digits:
        return f"{v:.0f}"
    return f"{v:.{max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))}f}"


def markdown(meta: dict, rows: list[dict]) -> str:
    names = [n for n in ("eager", "addmm_act", "compile", "jit", HYPATIA) if any(n in r["ms"] or n in r["skipped"] for r in rows)]
    with_ref = any(r["eager_vs_baseline"] for r in rows)
    lines = [f"# Hypatia ops benchmark: {meta['device_name']}", ""]
    for key in ("date_utc", "device", "cpu_model", "cpu_count", "threads", "torch", "cuda", "git_commit", "timing", "memory", "baseline", "chart"):
        lines.append(f"- {key}: {meta[key]}")
    lines += ["", "Ceilings measured in this run:", ""]
    for threads, c in meta["ceilings"].items():
        gemm = ", ".join(f"{k} {v / 1e3:.3g} TFLOP/s" for k, v in c["gemm_GFLOPs"].items())
        lines.append(f"- {'threads ' + threads + ': ' if meta['device'] == 'cpu' else ''}copy {c['copy_GBps']:.4g} GB/s; GEMM {gemm}")
    lines += ["", "Times are median ms per call. `hyp/best` and `hyp/eager` > 1: hypatia is faster. "
              "`%floor` = max(flop floor, byte floor) / time. Peak memory: MiB above the level before the call.", ""]
    notes = []
    for op, mode in [("linear_relu", "fwd"), ("linear_relu", "fwd+bwd"), ("mlp", "fwd"), ("mlp", "fwd+bwd")]:
        group = [r for r in rows if r["op"] == op and r["mode"] == mode and not r["memory_only"]]
        if not group:
            continue
        head = ["shape", "dtype"] + (["thr"] if meta["device"] == "cpu" else []) + names
        head += ["compile s", "hyp/best", "hyp/eager", "floor ms", "hyp %floor", "best %floor", "hyp err",
                 "mem MiB eager/hyp"] + (["eager/ref"] if with_ref else [])
        lines += [f"## {op} {mode}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in group:
            cells = [r["label"], r["dtype"]] + ([str(r["threads"])] if meta["device"] == "cpu" else [])
            for n in names:
                if n in r["ms"]:
                    cells.append(fmt(r["ms"][n]))
                elif r["status"].startswith("FAIL") and n in r["relerr"]:
                    cells.append("FAIL")
                elif n in r["skipped"]:
                    notes.append(f"{r['op']} {r['label']} {r['dtype']} {mode} thr={r['threads']}: {n} skipped: {r['skipped'][n]}")
                    cells.append(f"skip[{len(notes)}]")
                else:
                    cells.append("")
            if r["status"] != "ok":
                notes.append(f"{r['op']} {r['label']} {r['dtype']} {mode} thr={r['threads']}: {r['status']}")
                cells[1] += f" [{len(notes)}]"
            best = r["best_competitor"]
            mem = r["peak_mem_MiB"]
            cells += [fmt(r["compile_s"], 2), fmt(r["hypatia_vs_best"]) + (f" ({best})" if best else ""),
                      fmt(r["hypatia_vs_eager"]), f"{fmt(r['floor_ms'])} ({r['bound'][:3]})",
                      fmt(r["pct_of_floor"].get(HYPATIA)), fmt(r["pct_of_floor"].get(best)) if best else "",
                      f"{r['relerr'][HYPATIA]:.1e}" if HYPATIA in r["relerr"] else "",
                      f"{fmt(mem.get('eager'))} / {fmt(mem.get(HYPATIA))}" if mem else ""]
            if with_ref:
                cells.append(fmt(r["eager_vs_baseline"]))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    memory_rows = [r for r in rows if r["memory_only"]]
    if memory_rows:
        lines += ["## Peak memory only (inference)", "", "| op | shape | dtype | thr | eager MiB | hypatia MiB | hyp err | status |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in memory_rows:
            err = f"{r['relerr'][HYPATIA]:.1e}" if HYPATIA in r["relerr"] else ""
            lines.append(f"| {r['op']} | {r['label']} | {r['dtype']} | {r['threads']} | {fmt(r['peak_mem_MiB'].get('eager'))} | "
                         f"{fmt(r['peak_mem_MiB'].get(HYPATIA))} | {err} | {r['status']} |")
        lines.append("")
    if with_ref:
        lines += ["`eager/ref`: this run's eager time over the reference baseline's (1 = same; the baseline is an H100).", ""]
    lines += [f"Correctness: ||out - ref|| / ||ref|| against float64 (forward: {FWD_SAMPLE_ROWS} rows spread over M, "
              "and every element finite; fwd+bwd: every gradient, the largest error shown). Bars: "
              + ", ".join(f"{k} {v:.0e}" for k, v in TOLERANCE.items())
              + "; gradients (fwd+bwd): the larger of " + ", ".join(f"{k} {v:.0e}" for k, v in GRAD_TOLERANCE.items())
              + f" and {GRAD_VS_EAGER:g} x eager's own error, since ReLU masks that flip under rounding put even "
              "eager's gradients far from float64 (~4e-4 for a 4096x1024->4096 fp32 Linear+ReLU, ~1e-1 for an "
              "8-layer bf16 MLP; one flip moved a 65536x64 fp32 MLP's by ~1.5e-4); eager's own bar: "
              + ", ".join(f"{k} {v:.0e}" for k, v in GRAD_EAGER_SANITY.items()) + ".", ""]
    if notes:
        lines += ["Notes:", ""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)] + [""]
    return "\n".join(lines)


def chart(path: Path, meta: dict, rows: list[dict]) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"skipped: matplotlib not importable ({e})"
    timed = [r for r in rows if r["hypatia_vs_best"] or r["hypatia_vs_eager"]]
    if not timed:
        return "skipped: no timed rows"
    groups = [m for m in MODES if any(r["mode"] == m for r in timed)]
    height = max(3.0, 0.22 * max(sum(r["mode"] == m for r in timed) for m in groups) + 1.5)
    fig, axes = plt.subplots(1, len(groups), figsize=(7.5 * len(groups), height), squeeze=False)
    for ax, mode in zip(axes[0], groups):
        group = [r for r in timed if r["mode"] == mode]
        labels = [f"{r['op'][:3]} {r['label']} {r['dtype']}" + (f" t{r['threads']}" if meta["device"] == "cpu" else "") for r in group]
        y = range(len(group))
        # bars grow from 1 (same speed) to the ratio, so slower and faster point opposite ways
        for offset, key, label in ((-0.2, "hypatia_vs_best", "vs best competitor"), (0.2, "hypatia_vs_eager", "vs eager")):
            ratios = [r[key] or 1.0 for r in group]
            ax.barh([i + offset for i in y], [v - 1 for v in ratios], left=1.0, height=0.4, label=label)
        span = max(abs(math.log10(r[k])) for r in group for k in ("hypatia_vs_best", "hypatia_vs_eager") if r[k])
        ax.set_xscale("log")
        ax.set_xlim(10 ** -(span * 1.15 + 0.02), 10 ** (span * 1.15 + 0.02))
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(list(y), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("speed-up of hypatia (>1: hypatia faster)")
        ax.set_title(f"{mode}")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"hypatia ops, {meta['device_name']}, torch {meta['torch']}, {meta['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path.name)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny shapes, few reps, first thread count only: a smoke run")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "bench",
                   help="output folder (default build/bench; bench_cpu.sh and gpu_check.sh pass docs/perf/cpu, h100)")
    p.add_argument("--threads", default="1,2", help="CPU intra-op thread counts, comma-separated (default 1,2)")
    p.add_argument("--only", choices=["linear", "mlp"])
    p.add_argument("--dtypes", help="comma-separated subset of float32,tf32,bfloat16,float16 (fp32/bf16/fp16 too)")
    p.add_argument("--baseline", type=Path, help=f"reference timings (default ../shared/{BASELINE_NAME} or shared/{BASELINE_NAME} "
                   "beside/inside the repo root; skipped if absent)")
    p.add_argument("--max-call-s", type=float, help="skip an implementation whose single call would take longer "
                   "(default 3 on CPU, 60 on CUDA)")
    p.add_argument("--match", help="only rows whose 'op shape dtype' (e.g. 'mlp 65536x64-64x8L bfloat16') matches this regex")
    p.add_argument("--skip", default="", help="competitors to leave out, comma-separated: addmm_act,compile,jit")
    p.add_argument("--max-samples", type=int, help="most timed samples of a competitor in a row (default "
                   f"{CPU_MAX_SAMPLES} on CPU, {CUDA_MAX_SAMPLES} on CUDA; --quick takes its own few)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    args.skip = [n.strip() for n in args.skip.split(",") if n.strip()]
    if set(args.skip) - {"addmm_act", "compile", "jit"}:
        p.error(f"--skip: only addmm_act, compile and jit can be left out, not {args.skip}")
    if args.max_call_s is None:
        args.max_call_s = 3.0 if args.device == "cpu" else 60.0
    if args.dtypes:
        args.dtypes = [DTYPE_ALIASES.get(d.strip(), d.strip()) for d in args.dtypes.split(",")]
        unknown = [d for d in args.dtypes if d not in DTYPES]
        if unknown:
            p.error(f"--dtypes: unknown {unknown}, expected some of {list(DTYPES)}")
    if args.baseline is None:
        candidates = [ROOT.parent / "shared" / BASELINE_NAME, ROOT / "shared" / BASELINE_NAME]
        args.baseline = next((c for c in candidates if c.is_file()), candidates[0])
    return args


def build_cases(args) -> list[Case]:
    shapes = SHAPES["quick" if args.quick else args.device]
    cases = []
    for kind, op in (("linear", "linear_relu"), ("mlp", "mlp")):
        if args.only and args.only != kind:
            continue
        for dtype in DEFAULT_DTYPES[args.device][kind]:
            if args.dtypes and dtype not in args.dtypes:
                continue
            for shape in shapes[kind]:
                M, K, N, layers = shape if kind == "mlp" else (*shape, 1)
                if kind == "mlp" and dtype == "float16" and max(K, N) > NARROW:
                    continue
                case = Case(op, M, K, N, layers, dtype)
                if args.match and not re.search(args.match, f"{op} {case.label()} {dtype}"):
                    continue
                cases.append(case)
    if args.only in (None, "mlp"):
        for name in shapes.get("named", []):
            for dtype in ["float32"] if args.quick else NAMED_DTYPES[args.device]:
                case = Case.named(name, dtype)
                if (not args.dtypes or dtype in args.dtypes) and (
                        not args.match or re.search(args.match, f"mlp {case.label()} {dtype}")):
                    cases.append(case)
    if args.device == "cpu" and args.only in (None, "mlp") and (not args.dtypes or "float32" in args.dtypes):
        cases += [Case("mlp", M, D, H, layers, "float32", memory_only=True) for M, D, H, layers in shapes["memory_only"]]
    return cases


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.device == "cpu":
        threads_list = [int(t) for t in args.threads.split(",")]
        if args.quick:
            threads_list = threads_list[:1]
    else:
        threads_list = [None]
    cases = build_cases(args)
    dtypes = sorted({c.dtype for c in cases}, key=list(DTYPES).index)
    t_start = time.perf_counter()
    ceilings = {t: measure_ceilings(args.device, dtypes, args.quick, t) for t in threads_list}
    for t, c in ceilings.items():
        print(f"ceilings{f' (threads {t})' if t else ''}: copy {c['copy_GBps']:.4g} GB/s, GEMM "
              + ", ".join(f"{k} {v:.4g} GFLOP/s" for k, v in c["gemm_GFLOPs"].items()), flush=True)
    if args.device == "cuda":
        baseline, baseline_note = load_baseline(args.baseline)
    else:
        baseline, baseline_note = {}, "not used on CPU (the reference baseline holds CUDA timings)"
    runner = Runner(args)
    rows = []
    for case in cases:
        for mode in (("fwd",) if case.memory_only else MODES):
            # memory-only rows: one thread count (the last) is enough
            tl = threads_list[-1:] if case.memory_only else threads_list
            for row in runner.run_case(case, mode, tl, ceilings, baseline):
                rows.append(row)
                timings = " | ".join(f"{k} {fmt(v)} ms" for k, v in row["ms"].items())
                mem = ", ".join(f"{k} {fmt(v)} MiB" for k, v in row["peak_mem_MiB"].items())
                speed = f" -> {fmt(row['hypatia_vs_best'])}x best" if row["hypatia_vs_best"] else ""
                where = f" t={row['threads']}" if args.device == "cpu" else ""
                print(f"[{case.op} {case.label()} {case.dtype} {mode}{where}] {row['status']}: {timings}{speed}"
                      + (f" | mem {mem}" if mem else ""), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = metadata(args, threads_list, ceilings, baseline_note, runner.budget)
    meta["chart"] = chart(args.out / "speedup.png", meta, rows)
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    (args.out / "results.json").write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1))
    table = markdown(meta, rows)
    (args.out / "results.md").write_text(table)
    print(table)
    print(f"wrote {args.out}/results.json, results.md ({meta['chart']}) in {meta['wall_s']} s")
    if runner.failures:
        print("FAILED correctness checks:\n  " + "\n  ".join(runner.failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
