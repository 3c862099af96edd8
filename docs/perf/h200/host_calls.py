"""Host time of single calls on the GPU machine (tiny shapes, so the GPU never waits for anything):
cuTensorMapEncodeTiled (which the medium kernels call once per weight and kept output), torch.empty,
a one-kernel ATen op, torch.mm and F.linear against the library's ops, and _fused_mlp_backward (the
per-layer path of a 4-layer 256-wide MLP at 64 rows) for each choice of gradients; by
scripts/profile_ops.py's host_us_per_call (median of 5 loops of calls, synchronized at each loop's end).
Usage: python3 docs/perf/h200/host_calls.py (from the repository root, the library built)."""
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from profile_ops import host_us_per_call  # noqa: E402  (and the library, which profile_ops loads)


def main():
    cuda = ctypes.CDLL("libcuda.so.1")
    x = torch.empty(65536, 256, dtype=torch.bfloat16, device="cuda")
    tensor_map = (ctypes.c_uint64 * 16)()
    # bf16 (9), 2-D 65536 x 256, 64 x 64 boxes; no interleave (0), 128-byte swizzle (3), L2 256 B (3), no OOB fill
    encode_args = (tensor_map, 9, 2, ctypes.c_void_p(x.data_ptr()), (ctypes.c_uint64 * 2)(256, 65536),
                   (ctypes.c_uint64 * 1)(512), (ctypes.c_uint32 * 2)(64, 64), (ctypes.c_uint32 * 2)(1, 1), 0, 3, 3, 0)
    assert cuda.cuTensorMapEncodeTiled(*encode_args) == 0
    version = ctypes.c_int()
    y = torch.empty(1, device="cuda")
    a = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    ws, bs = [w] * 4, [b] * 4
    outputs = torch.ops.hypatia._fused_mlp_forward(a, ws, bs, False)
    g = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    calls = [
        ("cuTensorMapEncodeTiled via ctypes", lambda: cuda.cuTensorMapEncodeTiled(*encode_args), 2000),
        ("ctypes call of a no-op (cuDriverGetVersion)", lambda: cuda.cuDriverGetVersion(ctypes.byref(version)), 2000),
        ("torch.empty 65536x256 bf16", lambda: torch.empty(65536, 256, dtype=torch.bfloat16, device="cuda"), 2000),
        ("y.add_(1) (one tiny launch through ATen)", lambda: y.add_(1), 2000),
        ("torch.mm 64x256x256 bf16", lambda: torch.mm(a, w), 1000),
        ("F.linear 64x256x256 bf16", lambda: torch.nn.functional.linear(a, w, b), 1000),
        ("hypatia.fused_linear_relu 64x256x256 bf16", lambda: torch.ops.hypatia.fused_linear_relu(a, w, b), 1000),
        ("hypatia.fused_mlp 64 rows 4x256 bf16 (inference)",
         lambda: torch.ops.hypatia.fused_mlp(a, ws, bs, False), 1000),
        ("hypatia._fused_mlp_forward 64 rows 4x256",
         lambda: torch.ops.hypatia._fused_mlp_forward(a, ws, bs, False), 1000),
    ]
    for input_grad, params_grad in ((True, True), (False, True), (True, False)):
        calls.append((f"hypatia._fused_mlp_backward 64 rows 4x256 input_grad={input_grad} params_grad={params_grad}",
                      lambda i=input_grad, p=params_grad: torch.ops.hypatia._fused_mlp_backward(
                          g, a, ws, outputs[:-1], [True] * 4, False, i, p), 500))
    for label, fn, iters in calls:
        print(f"{label}: {host_us_per_call(fn, iters):.2f} us", flush=True)


if __name__ == "__main__":
    main()
