"""The medium forward (bf16, 65536 rows) in inference (no grad: only the last layer's output leaves
the kernel) and in training (every layer's output is kept for the backward).
  medium_forward_modes.py inference|training   dlrm-bottom, six calls: for ncu, as
      `ncu --kernel-name regex:medium_mlp_forward --launch-skip 4 --launch-count 1` (the fifth)
  medium_forward_modes.py time                 dlrm-bottom and mlp-256x4 in both modes, µs a call
      (median of 7 bursts of 50 calls back to back; the calls' other kernels included)"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
import hypatia_ops  # noqa: E402,F401

SHAPES = {"dlrm-bottom": ([13, 512, 256, 64], True), "mlp-256x4": ([256] * 5, False)}


def operands(name, training):
    widths, relu_last = SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(65536, widths[0], device="cuda", dtype=torch.bfloat16, generator=g)
    ws = [(torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) / i**0.5).requires_grad_(training)
          for i, o in zip(widths, widths[1:])]
    bs = [torch.randn(o, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(training)
          for o in widths[1:]]
    return lambda: torch.ops.hypatia.fused_mlp(x, ws, bs, relu_last)


if sys.argv[1] == "time":
    for name in SHAPES:
        for mode in ("inference", "training"):
            call = operands(name, mode == "training")
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            samples = []
            for _ in range(7):
                start.record()
                for _ in range(50):
                    call()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 50 * 1000)
            print(f"{name} {mode} {sorted(samples)[3]:.1f} us", flush=True)
else:
    call = operands("dlrm-bottom", sys.argv[1] == "training")
    for _ in range(6):
        out = call()
    torch.cuda.synchronize()
    print(sys.argv[1], "grad_fn" if out.grad_fn is not None else "no grad_fn", tuple(out.shape))
