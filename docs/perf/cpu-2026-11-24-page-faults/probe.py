"""What a fresh large CPU tensor costs: one elementwise pass into a new tensor against the same pass
into one already touched, for a 32 MiB tensor (glibc serves it with a new mmap, so every call
faults its pages in) and an 8 MiB one (served again from the heap after the first free); and the
32 MiB one with madvise(MADV_HUGEPAGE) before its first touch. Medians of ROUNDS interleaved rounds.
Environment: THR (threads, default 2), ROUNDS (default 10)."""
import ctypes, os, platform, statistics, time

import torch

torch.set_num_threads(int(os.environ.get("THR", "2")))
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_HUGEPAGE, HUGE = 14, 2 << 20


def empty_huge(rows, cols):
    """torch.empty with its whole 2 MiB pages marked MADV_HUGEPAGE before they are touched."""
    t = torch.empty(rows, cols, dtype=torch.bfloat16)
    begin, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    first, last = (begin + HUGE - 1) // HUGE * HUGE, end // HUGE * HUGE
    if last > first and libc.madvise(first, last - first, MADV_HUGEPAGE) != 0:
        raise OSError(ctypes.get_errno(), "madvise")
    return t


def thp(name):
    try:
        return open(f"/sys/kernel/mm/transparent_hugepage/{name}").read().strip()
    except OSError:
        return "unknown"


print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
      f"THP enabled: {thp('enabled')}, defrag: {thp('defrag')}")
cases = {}
for rows, size in [(4096, "32 MiB"), (1024, "8 MiB")]:
    g = torch.randn(rows, 4096).bfloat16()
    out = torch.randn(rows, 4096).bfloat16()
    touched = torch.zeros(rows, 4096, dtype=torch.bfloat16)
    cases[f"{size} threshold_backward, new tensor"] = lambda g=g, out=out: torch.ops.aten.threshold_backward(g, out, 0)
    cases[f"{size} threshold_backward, touched out="] = (
        lambda g=g, out=out, t=touched: torch.ops.aten.threshold_backward.grad_input(g, out, 0, grad_input=t))
    cases[f"{size} copy, new tensor"] = lambda g=g: g.clone()
    cases[f"{size} copy, touched"] = lambda g=g, t=touched: t.copy_(g)
    if rows == 4096:
        cases[f"{size} copy, new tensor, MADV_HUGEPAGE"] = lambda g=g: empty_huge(*g.shape).copy_(g)
times = {name: [] for name in cases}
for _ in range(int(os.environ.get("ROUNDS", "10"))):
    for name, fn in cases.items():
        start = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - start)
for name, ts in times.items():
    print(f"{name:45s} {statistics.median(ts[1:]) * 1e3:8.2f} ms  (min {min(ts[1:]) * 1e3:.2f})")
