import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)

# With two GPUs, every test taking `device` also runs on the GPU that is not current: the ops' device
# guards, per-device streams and caches (test ids: cpu, cuda, cuda1). HYPATIA_TEST_CURRENT_GPU=1 makes
# cuda:1 the current GPU for the whole run, and cuda:0 the other one (ids: cpu, cuda, cuda0).
if torch.cuda.device_count() > 1 and os.environ.get("HYPATIA_TEST_CURRENT_GPU"):
    torch.cuda.set_device(int(os.environ["HYPATIA_TEST_CURRENT_GPU"]))
OTHER_GPU = f"cuda:{1 - torch.cuda.current_device()}" if torch.cuda.device_count() > 1 else None
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) + ([OTHER_GPU] if OTHER_GPU else [])


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES, ids=[d.replace(":", "") for d in DEVICES])


def cpu_info(key):
    """The first value of `key` in /proc/cpuinfo ("flags", "vendor_id"), or "" where it is not found."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() == key), "")


def cpu_flags():
    return set(cpu_info("flags").split())


# Where float32 row blocks and wide layers' input gradients run oneDNN rather than MKL
# (ops/cpu/linear_act_cpu.cpp).
ONEDNN_FLOAT32_BLOCKS_CPU = cpu_info("vendor_id") == "AuthenticAMD" and "avx512f" in cpu_flags()


def float32_block_takes_onednn(rows: int, k: int, n: int) -> bool:
    """Whether a float32 row block of `rows` rows through a k -> n layer runs oneDNN's inner product
    (onednn_float32_block_pays in ops/cpu/linear_act_cpu.cpp): on AMD CPUs with AVX-512, from 256 rows,
    and on weights of 2^18 elements or more also from 64 rows and at 4-15."""
    wide = n * k >= 1 << 18
    return ONEDNN_FLOAT32_BLOCKS_CPU and (rows >= 256 or (wide and (rows >= 64 or 4 <= rows < 16)))


def f32_weight_grad_runs(rows: int, n: int, k: int) -> bool:
    """Whether a float32 layer of n output and k input features over `rows` rows takes the library's
    weight-gradient kernel (cpu_weight_grads in ops/cpu/linear_act_cpu.cpp): AMD CPUs with AVX-512,
    where MKL's sgemm runs AVX2 code, from 1024 rows and 2^20 weight elements."""
    return ONEDNN_FLOAT32_BLOCKS_CPU and rows >= 1024 and n * k >= 1 << 20

# The library's bfloat16 kernels (ops/cpu/bf16_gemm_avx512.cpp) run where oneDNN's GEMM is native
# bfloat16 and the CPU has AVX-512 BF16, but not AMX (whose oneDNN GEMM is faster).
BF16_KERNEL_CPU = {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"} <= cpu_flags() and "amx_bf16" not in cpu_flags()


# Without native bfloat16 GEMMs (oneDNN's bfloat16 needs AVX-512: on AVX2 CPUs) bfloat16 layers compute
# in float32, their backward in row blocks at every width (ops/cpu/blocked_backward_cpu.cpp), with no
# eager GEMM.
BF16_WIDENED_CPU = not torch.ops.mkldnn._is_mkldnn_bf16_supported()


def bf16_kernel_runs(rows: int, n: int, k: int) -> bool:
    """Whether a bfloat16 layer of k -> n features over `rows` rows runs the library's kernel on this
    CPU: the rows pay for packing its weight (bf16_gemm_pays in ops/cpu/linear_act_cpu.cpp)."""
    return (BF16_KERNEL_CPU and torch.ops.mkldnn._is_mkldnn_bf16_supported() and rows > 0 and n > 0 and k > 0
            and (rows >= 512 or n * k <= 1 << 18))


def bf16_wide_weight_grad_runs(rows: int, n: int, k: int) -> bool:
    """Whether a wide bfloat16 layer of n output and k input features over `rows` rows takes the
    library's weight-gradient kernel (cpu_weight_grads in ops/cpu/linear_act_cpu.cpp): where its
    bfloat16 kernels run, from 4096 rows and 2^20 weight elements."""
    return (BF16_KERNEL_CPU and torch.ops.mkldnn._is_mkldnn_bf16_supported() and rows >= 4096
            and n * k >= 1 << 20)


@contextlib.contextmanager
def cpu_threads(threads: int):
    """torch's intra-op thread count set to `threads` inside the block, restored after it."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64."""
    return ((out.double().cpu() - ref.double().cpu()).norm() / ref.double().cpu().norm()).item()


def linear_operands(lead, k, n, dtype, seed):
    """x [*lead, k], w [n, k] (scaled so that x @ w.T stays O(1)) and b [n], drawn in float64 from
    `seed`, then rounded to `dtype` on the GPU."""
    torch.manual_seed(seed)
    x = torch.randn(*lead, k, dtype=torch.float64)
    w = torch.randn(n, k, dtype=torch.float64) / k**0.5
    b = torch.randn(n, dtype=torch.float64)
    return [t.to(dtype).cuda() for t in (x, w, b)]


def autotuner_log(script, *args, env):
    """Runs a case script of this folder in a subprocess (the library reads its environment once per
    process) with HYPATIA_CUBLASLT_LOG=1 and `env` over os.environ (a value of None removes the
    variable); asserts it passed and returns the autotuner's log lines, one per tuned problem."""
    full_env = dict(os.environ, HYPATIA_CUBLASLT_LOG="1")
    for name, value in env.items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parent / script), *args], env=full_env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("hypatia cuBLASLt ")]


def run_case_from_argv(checks):
    """A case script's main: runs the check that sys.argv[1] names with the dtypes after it, then ends
    the process without the interpreter's shutdown, which PyTorch's CUDA autograd thread can race
    ("terminate called without an active exception", pytorch#38228: once in ~17 runs of the gradients
    check under 8 pytest workers on the H100, after every check had passed). A failed check raises
    before that, and exits non-zero as usual."""
    checks[sys.argv[1]](*(getattr(torch, a) for a in sys.argv[2:]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Relative error allowed against a float64 reference, by operand dtype.
TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def training_peak_bytes(forward, leaves, gout):
    """CUDA bytes the caching allocator hands out above the level before one forward+backward
    (torch.autograd.grad of forward() w.r.t. leaves), at its peak; after a first call, which
    autotunes."""
    torch.autograd.grad(forward(), leaves, gout)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    grads = torch.autograd.grad(forward(), leaves, gout)
    torch.cuda.synchronize()
    del grads
    return torch.cuda.max_memory_allocated() - base


def make_mlp(widths, dtype, bias_pattern="all", *, device):
    """Random layers; bias_pattern: 'all', 'none' or 'mixed' (None on odd layers)."""
    ws, bs = [], []
    for i, (k, n) in enumerate(zip(widths, widths[1:])):
        ws.append((torch.randn(n, k, dtype=torch.float64) / k**0.5).to(dtype).to(device))
        has_bias = bias_pattern == "all" or (bias_pattern == "mixed" and i % 2 == 0)
        bs.append(torch.randn(n, dtype=torch.float64).to(dtype).to(device) if has_bias else None)
    return ws, bs


def eager_mlp(x, ws, bs, relu_last):
    """The MLP that fused_mlp computes, in eager PyTorch."""
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = F.linear(h, w, b)
        if i + 1 < len(ws) or relu_last:
            h = F.relu(h)
    return h
