"""Does the cuBLASLt autotuner's pick for mlp-512x4's forward GEMMs (32768 x 512 x 512, ~37 µs, timed
in short bursts) depend on how busy the GPU was before? One process: optionally a burst of large
matmuls (--prewarm-ms), then one fused_mlp forward (the autotuner runs; HYPATIA_CUBLASLT_LOG=1 prints
its timings and picks on stderr), then 200 forwards timed by CUDA events (GPU-bound: ~135 µs each) on
the input the autotuner ran on and on three copies of it placed elsewhere in memory (does a pick's
speed depend on where the buffers lie?).
Usage: HYPATIA_CUBLASLT_LOG=1 python3 docs/perf/h100/autotune_warm_probe.py --dtype bfloat16 --prewarm-ms 0"""
import argparse

import torch

import hypatia_ops  # noqa: F401  (loads the library)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--prewarm-ms", type=float, default=0.0)
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(32768, 512, device="cuda", dtype=dtype, generator=gen)
    ws = [torch.randn(512, 512, device="cuda", dtype=dtype, generator=gen) / 512 ** 0.5 for _ in range(4)]
    bs = [torch.randn(512, device="cuda", dtype=dtype, generator=gen) for _ in range(4)]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if args.prewarm_ms > 0:
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype, generator=gen)
        start.record()
        while True:  # whole bursts of 10 matmuls until the GPU was busy that long
            for _ in range(10):
                a @ a
            stop.record()
            stop.synchronize()
            if start.elapsed_time(stop) >= args.prewarm_ms:
                break
    op = torch.ops.hypatia.fused_mlp.default

    def forward_us(inp):
        for _ in range(20):
            op(inp, ws, bs, False)
        start.record()
        for _ in range(200):
            op(inp, ws, bs, False)
        stop.record()
        stop.synchronize()
        return 1000 * start.elapsed_time(stop) / 200

    with torch.no_grad():
        op(x, ws, bs, False)  # the autotuner's timings happen here
        times = [forward_us(x)]
        kept = []  # allocations between the copies, so that each lies elsewhere
        for k in range(3):
            kept.append(torch.empty((k + 1) * 7 << 20, dtype=torch.uint8, device="cuda"))
            times.append(forward_us(x.clone()))
    print(f"forward {args.dtype} prewarm {args.prewarm_ms:g} ms, us: " + " ".join(f"{t:.1f}" for t in times),
          flush=True)


if __name__ == "__main__":
    main()
