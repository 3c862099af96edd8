"""Probe: a hidden layer's input gradient with the ReLU backward and bias sums in the GEMM's epilogue
(dgrad_probe.cu, CUTLASS), against cuBLAS's GEMM alone (torch.mm) and the unfused way's bytes.

python dgrad_probe.py LIB  (LIB: the built libdgrad_probe.so). bf16, on the current GPU.
Checks each fused variant against float64 (output and bias gradient, NaN/zero masks), then times,
in rounds alternating, µs a call (median of bursts): torch.mm(G, W); the CUTLASS GEMM without the
epilogue work; the fused CUTLASS kernel. The unfused way adds, after the GEMM, a pass that reads the
GEMM's output and H and writes the masked gradient (3 x rows x k_in x 2 bytes).
"""
import ctypes
import statistics
import sys

import torch

lib = ctypes.CDLL(sys.argv[1])
lib.probe_workspace.restype = ctypes.c_size_t
lib.probe_workspace.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
lib.probe_run.restype = ctypes.c_int
lib.probe_run.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 2
VARIANTS = {0: "coop 128x256 relu+bias", 1: "coop 128x256 relu", 2: "coop 128x256 plain",
            3: "pingpong 64x256 relu+bias", 4: "pingpong 64x256 relu", 5: "pingpong 64x256 plain",
            6: "pingpong 128x128 relu"}
FUSED_BIAS, FUSED_RELU = (0, 3), (1, 4, 6)


def run(variant, w, g, h, d, dbias, ws):
    rows, n_out = g.shape
    k_in = w.shape[1]
    rc = lib.probe_run(variant, w.data_ptr(), g.data_ptr(), h.data_ptr(), d.data_ptr(),
                       dbias.data_ptr(), rows, n_out, k_in, ws.data_ptr(),
                       torch.cuda.current_stream().cuda_stream)
    if rc != 0:
        raise RuntimeError(f"variant {variant}: rc {rc}")


def workspace(variant, rows, n_out, k_in):
    return torch.empty(max(1, lib.probe_workspace(variant, rows, n_out, k_in)), dtype=torch.uint8, device="cuda")


def check(rows, n_out, k_in):
    gen = torch.Generator(device="cuda").manual_seed(rows + n_out + k_in)
    g = torch.randn(rows, n_out, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n_out, k_in, device="cuda", dtype=torch.bfloat16, generator=gen) / n_out ** 0.5
    h = torch.relu(torch.randn(rows, k_in, device="cuda", dtype=torch.bfloat16, generator=gen))
    h[0, :7] = float("nan")  # NaN output: eager passes the gradient
    h[1, :5] = -0.0
    g[2, 0] = float("nan")  # a NaN gradient row: NaN where the ReLU passed, 0 where not
    ref = (g.double() @ w.double())
    ref_d = torch.where(h.double() <= 0, torch.zeros_like(ref), ref)
    ref_b = ref_d.sum(0)
    eager_d = torch.ops.aten.threshold_backward(g @ w, h, 0)
    out = []
    for v in FUSED_BIAS + FUSED_RELU:
        d = torch.empty(rows, k_in, device="cuda", dtype=torch.bfloat16)
        dbias = torch.empty(k_in, device="cuda", dtype=torch.bfloat16)
        run(v, w, g, h, d, dbias, workspace(v, rows, n_out, k_in))
        torch.cuda.synchronize()
        same_nan = torch.equal(d.isnan(), eager_d.isnan())
        fin = ~ref_d.isnan()
        err = ((d.double()[fin] - ref_d[fin]).norm() / ref_d[fin].norm()).item()
        if v in FUSED_RELU:
            dbias = d.double().sum(0)
        bfin = ~ref_b.isnan()
        berr = ((dbias.double()[bfin] - ref_b[bfin]).norm() / ref_b[bfin].norm()).item()
        zeros_ok = bool((d[1, :5] == 0).all()) and bool((d[0, :7] == eager_d[0, :7]).all())
        out.append(f"{VARIANTS[v]}: rel err {err:.1e}, bias {berr:.1e}, NaN as eager {same_nan}, "
                   f"masks as eager {zeros_ok}, bias NaN as ref {torch.equal(dbias.isnan(), ref_b.isnan())}")
    return out


def bench(rows, n_out, k_in, rounds=7, calls=20):
    gen = torch.Generator(device="cuda").manual_seed(1)
    g = torch.randn(rows, n_out, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n_out, k_in, device="cuda", dtype=torch.bfloat16, generator=gen) / n_out ** 0.5
    h = torch.relu(torch.randn(rows, k_in, device="cuda", dtype=torch.bfloat16, generator=gen))
    d = torch.empty(rows, k_in, device="cuda", dtype=torch.bfloat16)
    dbias = torch.empty(k_in, device="cuda", dtype=torch.bfloat16)
    ws = {v: workspace(v, rows, n_out, k_in) for v in VARIANTS}
    ways = {"torch.mm": lambda: torch.mm(g, w, out=d)}
    for v in VARIANTS:
        ways[VARIANTS[v]] = (lambda v=v: run(v, w, g, h, d, dbias, ws[v]))
    times = {k: [] for k in ways}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for f in ways.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, f in ways.items():
            start.record()
            for _ in range(calls):
                f()
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) * 1000 / calls)
    med = {k: statistics.median(v) for k, v in times.items()}
    pass_us = 3 * rows * k_in * 2 / 2.9e6  # the unfused ReLU pass at the 2.9 TB/s it runs at
    sums_us = rows * k_in * 2 / 2.9e6  # a pass of column sums over the fused output
    flop_us = 2 * rows * n_out * k_in / 781e6
    line = f"rows {rows} n_out {n_out} k_in {k_in}: floor {flop_us:.1f} us flops; " + ", ".join(
        f"{k} {v:.1f}" for k, v in med.items())
    unfused = med['torch.mm'] + pass_us
    best_bias = min(med[VARIANTS[v]] for v in FUSED_BIAS)
    best_relu = min(med[VARIANTS[v]] for v in FUSED_RELU) + sums_us
    line += (f"; unfused ~ mm + pass = {unfused:.1f}; fused with sums {best_bias:.1f}, "
             f"fused relu + sums pass ~ {best_relu:.1f}; saves ~{unfused - min(best_bias, best_relu):.1f} us")
    return line


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    for shape in [(4101, 256, 512), (777, 1024, 1024), (8192, 64, 128)]:
        for line in check(*shape):
            print("check", shape, line)
    for shape in [(65536, 1024, 1024), (65536, 512, 1024), (65536, 256, 512), (32768, 512, 512),
                  (16384, 1024, 1024), (8192, 1024, 1024)]:
        print(bench(*shape), flush=True)
