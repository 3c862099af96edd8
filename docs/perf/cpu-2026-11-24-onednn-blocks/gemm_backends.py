"""One row block's GEMM, x[M, K] @ w.T + b, by the CPU backends the library can call: ATen's addmm
(MKL's sgemm for float32, oneDNN's matmul for native bfloat16), oneDNN's inner product
(mkldnn::_linear_pointwise) with a dense weight, and the same with the weight packed once into its
own layout (mkldnn::_reorder_linear_weight). Median ms of repeated calls, 1 and 2 threads, the
backends interleaved in two rounds.

    python gemm_backends.py [--dtypes float32,bfloat16]
"""
import argparse
import platform
import statistics
import time

import torch


def median_ms(fn, calls):
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    print(f"# {cpu_model()}, torch {torch.__version__}, ATen CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, oneDNN native bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}")
    linear = torch.ops.mkldnn._linear_pointwise
    for threads in map(int, args.threads.split(",")):
        torch.set_num_threads(threads)
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            for m, k, n in [(256, 256, 512), (1024, 256, 512), (1024, 784, 2048), (1024, 1024, 4096), (1024, 4096, 1024)]:
                x = torch.randn(m, k).to(dtype)
                w, b = (torch.randn(n, k) / k**0.5).to(dtype), torch.randn(n).to(dtype)
                out = torch.empty(m, n, dtype=dtype)
                packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
                calls = max(5, int(3e9 / (m * k * n) / (2 if dtype == torch.float32 else 1)))
                times = {"aten": [], "onednn": [], "packed": [], "pack": []}
                for _ in range(2):
                    times["aten"].append(median_ms(lambda: torch.addmm(b, x, w.t(), out=out), calls))
                    times["onednn"].append(median_ms(lambda: linear(x, w, b, "none", [], ""), calls))
                    times["packed"].append(median_ms(lambda: linear(x, packed, b, "none", [], ""), calls))
                    times["pack"].append(median_ms(lambda: torch.ops.mkldnn._reorder_linear_weight(w, m), calls))
                t = {key: min(v) for key, v in times.items()}
                print(f"threads {threads} {str(dtype)[6:]:8} {m}x{k}->{n}: aten addmm {t['aten']:.3f}  "
                      f"onednn {t['onednn']:.3f}  onednn packed {t['packed']:.3f}  (packing {t['pack']:.3f})  "
                      f"aten/onednn {t['aten'] / t['onednn']:.3f}  aten/packed {t['aten'] / t['packed']:.3f}", flush=True)


if __name__ == "__main__":
    main()
