"""Host time of single calls on the GPU machine (tiny shapes, so the GPU never waits for anything):
cuTensorMapEncodeTiled (which the medium kernels call once per weight and kept output), torch.empty,
a one-kernel ATen op, torch.mm and F.linear against the library's ops, and _fused_mlp_backward (the
per-layer path of a 4-layer 256-wide MLP at 64 rows) for each choice of gradients.
Usage: python3 docs/perf/h200/host_calls.py (from the repository root, the library built)."""
import ctypes
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401  (loads the library)


def per_call(fn, n=20000):
    """Microseconds a call, over n calls after one."""
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main():
    cuda = ctypes.CDLL("libcuda.so.1")
    x = torch.empty(65536, 256, dtype=torch.bfloat16, device="cuda")
    tensor_map = (ctypes.c_uint64 * 16)()
    # bf16 (9), 2-D 65536 x 256, 64 x 64 boxes; no interleave (0), 128-byte swizzle (3), L2 256 B (3), no OOB fill
    encode_args = (tensor_map, 9, 2, ctypes.c_void_p(x.data_ptr()), (ctypes.c_uint64 * 2)(256, 65536),
                   (ctypes.c_uint64 * 1)(512), (ctypes.c_uint32 * 2)(64, 64), (ctypes.c_uint32 * 2)(1, 1), 0, 3, 3, 0)
    assert cuda.cuTensorMapEncodeTiled(*encode_args) == 0
    version = ctypes.c_int()
    print(f"cuTensorMapEncodeTiled via ctypes: {per_call(lambda: cuda.cuTensorMapEncodeTiled(*encode_args)):.2f} us")
    print(f"ctypes call of a no-op (cuDriverGetVersion): {per_call(lambda: cuda.cuDriverGetVersion(ctypes.byref(version))):.2f} us")
    print(f"torch.empty 65536x256 bf16: {per_call(lambda: torch.empty(65536, 256, dtype=torch.bfloat16, device='cuda')):.2f} us")
    y = torch.empty(1, device="cuda")
    print(f"y.add_(1) (one tiny launch through ATen): {per_call(lambda: y.add_(1)):.2f} us")
    a = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    print(f"torch.mm 64x256x256 bf16: {per_call(lambda: torch.mm(a, w), 5000):.2f} us")
    print(f"F.linear 64x256x256 bf16: {per_call(lambda: torch.nn.functional.linear(a, w, b), 5000):.2f} us")
    print(f"hypatia.fused_linear_relu 64x256x256 bf16: "
          f"{per_call(lambda: torch.ops.hypatia.fused_linear_relu(a, w, b), 5000):.2f} us")
    ws, bs = [w] * 4, [b] * 4
    print(f"hypatia.fused_mlp 64 rows 4x256 bf16 (inference): "
          f"{per_call(lambda: torch.ops.hypatia.fused_mlp(a, ws, bs, False), 5000):.2f} us")
    print(f"hypatia._fused_mlp_forward 64 rows 4x256: "
          f"{per_call(lambda: torch.ops.hypatia._fused_mlp_forward(a, ws, bs, False), 5000):.2f} us")
    outputs = torch.ops.hypatia._fused_mlp_forward(a, ws, bs, False)
    g = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    for input_grad, params_grad in ((True, True), (False, True), (True, False)):
        def backward():
            torch.ops.hypatia._fused_mlp_backward(g, a, ws, outputs[:-1], [True] * 4, False, input_grad, params_grad)
        print(f"hypatia._fused_mlp_backward 64 rows 4x256 input_grad={input_grad} params_grad={params_grad}: "
              f"{per_call(backward, 3000):.2f} us")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
