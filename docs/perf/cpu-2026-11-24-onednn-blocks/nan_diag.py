"""Where oneDNN's bfloat16 inner product (dense and packed weight) and eager's bfloat16 linear
disagree on NaN and Inf, on the data of test_cpu_row_blocks_share_a_packed_onednn_weight."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../tests/python"))
from test_forward import layer  # noqa: E402

torch.ops.load_library(os.environ["HYPATIA_OPS_LIBRARY"])
torch.manual_seed(12)
dtype = torch.bfloat16
x = torch.randn(2500, 200, dtype=torch.float64).to(dtype)
x[1500, 3], x[2400, 7] = float("nan"), float("inf")
widths = [200, 520, 300, 260]
ws, bs = zip(*(layer(i, o, dtype, "cpu", bias=j != 1) for j, (i, o) in enumerate(zip(widths, widths[1:]))))
print("cpu capability", torch.backends.cpu.get_cpu_capability(), "native bf16", torch.ops.mkldnn._is_mkldnn_bf16_supported())


def show(name, got, eager):
    diff = (got.isnan() != eager.isnan()) | (got.isinf() != eager.isinf())
    rows = diff.any(-1).nonzero().flatten().tolist()
    print(f"{name}: rows differing in NaN/Inf {rows[:10]} ({diff.sum().item()} elements); "
          f"row 1500 NaN ours {got[1500].isnan().sum().item()} eager {eager[1500].isnan().sum().item()}; "
          f"row 2400 NaN ours {got[2400].isnan().sum().item()} eager {eager[2400].isnan().sum().item()} "
          f"inf ours {got[2400].isinf().sum().item()} eager {eager[2400].isinf().sum().item()}")
    for r in rows[:2]:
        cols = diff[r].nonzero().flatten()[:5]
        print(f"  row {r} cols {cols.tolist()}: ours {got[r, cols].tolist()} eager {eager[r, cols].tolist()}")


lp = torch.ops.mkldnn._linear_pointwise
packed = torch.ops.mkldnn._reorder_linear_weight(ws[0], 1024)
eager1 = F.linear(x, ws[0], bs[0])
show("layer 0, oneDNN inner product, dense weight", lp(x, ws[0], bs[0], "none", [], ""), eager1)
show("layer 0, oneDNN inner product, packed weight", lp(x, packed, bs[0], "none", [], ""), eager1)
blocks = torch.cat([lp(x[r:r + 1024], packed, bs[0], "none", [], "") for r in range(0, 2500, 1024)])
show("layer 0, packed, 1024-row blocks", blocks, eager1)
show("fused_linear_relu", torch.ops.hypatia.fused_linear_relu(x, ws[0], bs[0]), F.relu(eager1))
h = F.relu(eager1)
eager2 = F.linear(h, ws[1])
show("layer 1 on eager's h, dense", lp(h, ws[1], None, "none", [], ""), eager2)
show("layer 1 on eager's h, packed", lp(h, torch.ops.mkldnn._reorder_linear_weight(ws[1], 1024), None, "none", [], ""), eager2)
eager_mlp = F.relu(F.linear(F.relu(F.linear(F.relu(eager1), ws[1])), ws[2], bs[2]))
show("fused_mlp", torch.ops.hypatia.fused_mlp(x, list(ws), list(bs), True), eager_mlp)
reference = F.relu(F.linear(x.double(), ws[0].double(), bs[0].double()))
show("fused_linear_relu against float64", torch.ops.hypatia.fused_linear_relu(x, ws[0], bs[0]), reference)
show("eager against float64", F.relu(eager1), reference)
for threads in (1, 2, 4):
    torch.set_num_threads(threads)
    show(f"fused_linear_relu against float64, {threads} threads", torch.ops.hypatia.fused_linear_relu(x, ws[0], bs[0]), reference)
