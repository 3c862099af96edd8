"""Probe (issue 39): a 256 -> 256 hidden layer's backward in one pass (layer_backward_probe.cu)
against eager's ops for the same results, checked against float64, then timed from CUDA graphs.

    python3 layer_backward_probe.py LIB [LIB ...] [--rows 65536] [--rounds 3] [--groups G ...]

Each LIB is a build of layer_backward_probe.cu (e.g. with and without -DPROBE_MULTICAST=1), all
checked, then timed in the same rounds as eager.

The probe's step is its kernel plus the float32 partial sums added up and rounded (dw, db);
eager's is g @ w, threshold_backward, g.t() @ x and g.sum(0), the per-layer path's four results.
"""
import argparse
import ctypes
import datetime
import statistics
import subprocess

import torch

WIDTH = 256


def load(path):
    lib = ctypes.CDLL(path)
    lib.layer_backward.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 7 + [
        ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.layer_backward.restype = ctypes.c_int
    lib.layer_backward_max_active.argtypes = [ctypes.c_int]
    lib.layer_backward_max_active.restype = ctypes.c_int
    lib.layer_backward_reduce.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_void_p]
    lib.layer_backward_reduce.restype = ctypes.c_int
    return lib


class Probe:
    def __init__(self, lib, g, x, w, groups, mode=0):
        self.lib, self.g, self.x, self.w, self.groups, self.mode = lib, g, x, w, groups, mode
        rows = g.shape[0]
        self.dx = torch.empty_like(g)
        self.scratch = torch.empty(64, WIDTH, device=g.device, dtype=g.dtype)
        self.dw = torch.empty(WIDTH, WIDTH, device=g.device, dtype=g.dtype)
        self.db = torch.empty(WIDTH, device=g.device, dtype=g.dtype)
        self.dw_part = torch.empty(groups, WIDTH, WIDTH, device=g.device, dtype=torch.float32)
        self.db_part = torch.empty(groups, WIDTH, device=g.device, dtype=torch.float32)
        self.rows = rows

    def kernel(self):
        rc = self.lib.layer_backward(
            0 if self.g.dtype == torch.bfloat16 else 1, self.g.data_ptr(), self.x.data_ptr(), self.w.data_ptr(),
            self.dx.data_ptr(), self.scratch.data_ptr(), self.dw_part.data_ptr(), self.db_part.data_ptr(), self.rows,
            self.groups, self.mode, torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError(f"layer_backward failed: {rc}")

    def step(self):
        """The kernel, then the partial sums added up by the probe's own kernel."""
        self.kernel()
        rc = self.lib.layer_backward_reduce(
            0 if self.g.dtype == torch.bfloat16 else 1, self.dw_part.data_ptr(), self.db_part.data_ptr(),
            self.dw.data_ptr(), self.db.data_ptr(), self.groups, torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError(f"layer_backward_reduce failed: {rc}")
        return self.dx, self.dw, self.db

    def step_torch_sums(self):
        self.kernel()
        return self.dx, self.dw_part.sum(0).to(self.g.dtype), self.db_part.sum(0).to(self.g.dtype)


def eager_step(g, x, w):
    dx = torch.ops.aten.threshold_backward(g @ w, x, 0)
    return dx, g.t() @ x, g.sum(0)


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-300)).item()


def check(lib, rows, dtype, groups):
    torch.manual_seed(rows + groups)
    dev = "cuda"
    g = torch.randn(rows, WIDTH, device=dev).to(dtype)
    x = torch.relu(torch.randn(rows, WIDTH, device=dev)).to(dtype)
    w = (torch.randn(WIDTH, WIDTH, device=dev) / 16).to(dtype)
    if rows > 8:  # eager's ReLU-backward semantics: NaN in x passes the gradient, NaN in g where x <= 0 does not
        x[3, 5] = float("nan")
        g[4, :] = float("nan")
        x[4, :7] = 0
    probe = Probe(lib, g, x, w, groups)
    dx, dw, db = probe.step()
    torch.cuda.synchronize()
    gd, xd, wd = g.double(), x.double(), w.double()
    ref_dx = torch.ops.aten.threshold_backward(gd @ wd, xd, 0)
    # dx: every row but 4 (NaN in g); dw and db: rows 3 and 4 out too (their NaN reach every sum they touch,
    # in eager too; that they do is checked below)
    keep_dx = torch.ones(rows, dtype=torch.bool, device=dev)
    keep_dw = keep_dx.clone()
    if rows > 8:
        keep_dx[4] = False
        keep_dw[3:5] = False
    ok_nan = torch.equal(dx.isnan(), ref_dx.isnan())
    e_dx = rel(dx[keep_dx], ref_dx[keep_dx])
    gf, xf = gd[keep_dw], xd[keep_dw]
    probe2 = Probe(lib, g[keep_dw].contiguous(), x[keep_dw].contiguous(), w, groups)
    _, dw2, db2 = probe2.step()
    torch.cuda.synchronize()
    e_dw = rel(dw2, gf.t() @ xf)
    e_db = rel(db2, gf.sum(0))
    eager = eager_step(g[keep_dw].contiguous(), x[keep_dw].contiguous(), w)
    e_eager = (rel(eager[0], ref_dx[keep_dw]), rel(eager[1], gf.t() @ xf), rel(eager[2], gf.sum(0)))
    dw_nan_ok = bool(dw.isnan().any()) and bool(db.isnan().any())
    print(f"check {str(dtype)[6:]} rows {rows} groups {groups}: rel err dx {e_dx:.2e} dw {e_dw:.2e} db {e_db:.2e}"
          f" (eager {e_eager[0]:.2e} {e_eager[1]:.2e} {e_eager[2]:.2e}); NaN pattern of dx as float64's: {ok_nan};"
          f" NaN row reaches dw, db: {dw_nan_ok}")
    tol = 1e-2
    return e_dx < tol and e_dw < tol and e_db < tol and ok_nan and dw_nan_ok


def graph_of(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()  # a failing contender fails here, by name in the traceback's caller
    return graph


def time_graph(graph, reps=50, bursts=7):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(bursts):
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / reps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", type=int, nargs="*", default=None, help="0: as many as are resident at once")
    args = ap.parse_args()
    libs = {path.rsplit("/", 1)[-1]: load(path) for path in args.libs}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name(0)},"
          f" torch {torch.__version__}, tree {commit}")
    ok = True
    for name, lib in libs.items():
        print(name)
        for dtype in (torch.bfloat16, torch.float16):
            for rows, groups in ((65536, sms // 4), (65536, sms // 2), (4101, 7), (64, 1), (1000, 33), (130, 5)):
                ok &= check(lib, rows, dtype, groups)
    print("checks:", "passed" if ok else "FAILED")
    if not ok:
        return 1
    rows = args.rows
    floor_bytes = 3 * rows * WIDTH * 2  # g and x in, dx out
    floor_flops = 2 * 2 * rows * WIDTH * WIDTH  # both GEMMs
    floor_us = max(floor_bytes / 3.0e12, floor_flops / 787e12) * 1e6
    print(f"rows {rows}: floor {floor_us:.1f} us (bytes {floor_bytes / 3.0e12 * 1e6:.1f}, flops"
          f" {floor_flops / 787e12 * 1e6:.1f})")
    for dtype in (torch.bfloat16, torch.float16):
        torch.manual_seed(0)
        g = torch.randn(rows, WIDTH, device="cuda").to(dtype)
        x = torch.relu(torch.randn(rows, WIDTH, device="cuda")).to(dtype)
        w = (torch.randn(WIDTH, WIDTH, device="cuda") / 16).to(dtype)
        contenders = {"eager (4 ops)": graph_of(lambda: eager_step(g, x, w)),
                      "eager g@w + threshold_backward": graph_of(
                          lambda: torch.ops.aten.threshold_backward(g @ w, x, 0)),
                      "eager g.t()@x": graph_of(lambda: g.t() @ x),
                      "eager g.sum(0)": graph_of(lambda: g.sum(0))}
        for name, lib in libs.items():
            resident = lib.layer_backward_max_active(sms // 4)
            resident = resident if resident > 0 else sms // 4
            print(f"{name}: {resident} groups of 4 CTAs resident at once")
            for groups in [resident if gr == 0 else gr for gr in args.groups or [0]]:
                probe = Probe(lib, g, x, w, groups)
                contenders[f"{name} step, {groups} groups"] = graph_of(probe.step)
                contenders[f"{name} step (torch sums), {groups} groups"] = graph_of(probe.step_torch_sums)
                contenders[f"{name} kernel, {groups} groups"] = graph_of(probe.kernel)
                for mode, what in ((1, "dw+db only"), (2, "dx only"), (3, "loads only")):
                    pm = Probe(lib, g, x, w, groups, mode)
                    contenders[f"{name} kernel {what}, {groups} groups"] = graph_of(pm.kernel)
        times = {k: [] for k in contenders}
        for _ in range(args.rounds):
            for k, graph in contenders.items():
                times[k].append(time_graph(graph))
        for k, ts in times.items():
            med = statistics.median(ts)
            print(f"{str(dtype)[6:]:8s} {k:48s} {med:7.1f} us  (rounds {', '.join(f'{t:.1f}' for t in ts)})"
                  f"  {100 * floor_us / med:5.1f}% of floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
