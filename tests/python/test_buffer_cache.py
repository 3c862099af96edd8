"""The CPU buffer cache (ops/cpu/buffer_cache.h): fused_mlp's training forward takes its hidden outputs
of 32 MiB or more from blocks that earlier ones freed, and its results stay eager's; tensors below
32 MiB bypass it; resizing and emptying; its limit, HYPATIA_CPU_BUFFER_CACHE_MIB, read in a fresh
process."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import hypatia_ops
from conftest import TOLERANCE, eager_mlp, make_mlp, rel_error

MIB = 1 << 20
ROWS = 8192
# Hidden widths whose [8192, H] output is exactly 32 MiB, the smallest the cache takes.
HIDDEN = {torch.float32: 1024, torch.bfloat16: 2048}


@pytest.fixture(autouse=True)
def empty_cache():
    hypatia_ops.empty_cpu_buffer_cache()
    yield
    hypatia_ops.empty_cpu_buffer_cache()


def random_step(dtype, rows, seed):
    """A 2-layer MLP's operands from `seed`: x [rows, 64], weights and biases, the output's gradient."""
    torch.manual_seed(seed)
    ws, bs = make_mlp([64, HIDDEN[dtype], 48], dtype, device="cpu")
    x = torch.randn(rows, 64, dtype=torch.float64).to(dtype)
    gout = torch.randn(rows, 48, dtype=torch.float64).to(dtype)
    return x, ws, bs, gout


def grads_of(forward, x, ws, bs, gout):
    leaves = [t.detach().requires_grad_() for t in [x, *ws, *bs]]
    out = forward(leaves[0], leaves[1:3], leaves[3:])
    return [out, *torch.autograd.grad(out, leaves, gout)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_reuses_the_saved_hidden_block(dtype):
    block = ROWS * HIDDEN[dtype] * dtype.itemsize
    for seed in range(3):
        x, ws, bs, gout = random_step(dtype, ROWS, seed)
        leaves = [t.detach().requires_grad_() for t in [x, *ws, *bs]]
        out = hypatia_ops.fused_mlp(leaves[0], leaves[1:3], leaves[3:])
        # The saved hidden output holds the block (the one the last call freed, after the first).
        assert hypatia_ops.cpu_buffer_cache_bytes() == 0
        got = [out, *torch.autograd.grad(out, leaves, gout)]
        assert hypatia_ops.cpu_buffer_cache_bytes() == block  # freed with the graph, kept
        # Each call on new data from a block that held the last one's: as close to float64 as eager.
        want = grads_of(lambda x, ws, bs: eager_mlp(x, ws, bs, False), x.double(), [w.double() for w in ws],
                        [b.double() for b in bs], gout.double())
        eager = grads_of(lambda x, ws, bs: eager_mlp(x, ws, bs, False), x, ws, bs, gout)
        for name, g, e, w in zip(["out", "x", "w0", "w1", "b0", "b1"], got, eager, want):
            assert rel_error(g, w) <= max(2 * rel_error(e, w), TOLERANCE[dtype]), (seed, name)


def test_smaller_tensors_bypass_the_cache():
    x, ws, bs, gout = random_step(torch.float32, ROWS - 1, 0)  # hidden output one row short of 32 MiB
    grads_of(hypatia_ops.fused_mlp, x, ws, bs, gout)
    assert hypatia_ops.cpu_buffer_cache_bytes() == 0


def test_resizing_a_cached_tensor_keeps_its_data_and_frees_the_block():
    x, ws, bs, _ = random_step(torch.float32, ROWS, 0)
    hidden = torch.ops.hypatia._fused_mlp_forward(x, ws, bs, False)[0]
    before = hidden.clone()
    hidden.resize_(2 * ROWS, HIDDEN[torch.float32])  # new memory from ATen's allocator
    assert hypatia_ops.cpu_buffer_cache_bytes() == 32 * MIB
    assert torch.equal(hidden[:ROWS], before)
    del hidden
    assert hypatia_ops.cpu_buffer_cache_bytes() == 32 * MIB  # the grown memory was not the cache's
    assert hypatia_ops.empty_cpu_buffer_cache() == 32 * MIB
    assert hypatia_ops.cpu_buffer_cache_bytes() == 0


def in_fresh_process(limit, code):
    """Runs `code` (after the library loads) in a new Python with HYPATIA_CPU_BUFFER_CACHE_MIB=limit."""
    prelude = f"""
        import sys, warnings
        warnings.filterwarnings("ignore")
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "python")!r})
        import torch, hypatia_ops
        def hidden(rows, width):  # a training forward's hidden output, [rows, width] float32
            x = torch.randn(rows, 8)
            return torch.ops.hypatia._fused_mlp_forward(x, [torch.randn(width, 8), torch.randn(4, width)],
                                                        [None, None], False)[0]
    """
    return subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
                          env=dict(os.environ, HYPATIA_CPU_BUFFER_CACHE_MIB=limit), capture_output=True, text=True,
                          timeout=300)


def test_the_limit_keeps_the_newest_blocks_that_fit():
    proc = in_fresh_process("80", """
        a, b, c = hidden(8192, 1024), hidden(8192, 1025), hidden(8192, 1026)  # 32 MiB and a bit more each
        del a, b
        kept_two = hypatia_ops.cpu_buffer_cache_bytes()
        del c  # the oldest, a's, goes back to the system
        kept_newest = hypatia_ops.cpu_buffer_cache_bytes()
        d = hidden(8192, 1024)  # a's size: not kept any more, so new memory
        big = hidden(8192, 4096)  # 128 MiB, above the limit
        del big
        print(kept_two, kept_newest, hypatia_ops.cpu_buffer_cache_bytes())
    """)
    assert proc.returncode == 0, proc.stderr
    a, b, c = (8192 * width * 4 for width in (1024, 1025, 1026))
    assert proc.stdout.split() == [str(a + b), str(b + c), str(b + c)]


def test_a_zero_limit_keeps_nothing():
    proc = in_fresh_process("0", """
        h = hidden(8192, 1024)
        del h
        print(hypatia_ops.cpu_buffer_cache_bytes())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0"]


def test_a_bad_limit_is_a_clear_error():
    proc = in_fresh_process("lots", "hidden(8192, 1024)")
    assert proc.returncode != 0
    assert "HYPATIA_CPU_BUFFER_CACHE_MIB: expected a whole number of mebibytes, got 'lots'" in proc.stderr
