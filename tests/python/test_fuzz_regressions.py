"""The bugs that the differential fuzzer (tests/fuzz/fuzz_passes.py) found, each as the shrunk
program it printed, run through the pipeline that failed (and its neighbours) by check_program."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_passes  # noqa: E402

# fuse(freeze=True) froze with torch::jit::freeze's defaults, which keep only forward: the module's
# @torch.jit.export methods were dropped from the fused module (torch.jit.freeze(preserved_attrs=[...])
# keeps them). Seed 0, program 23.
EXPORTED_METHOD = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 4, bias=True)
        self.fc7 = nn.Linear(4, 3, bias=True)
    def forward(self, x):
        return self.fc1(x).relu()
    @torch.jit.export
    def aux(self, x):
        return self.fc7(F.relu(self.fc1(x))).relu()
"""

# A traced in-place ReLU of a value nothing reads survived ConstantPropagation: the dead chain was
# fused, counted by the report, and dropped when the module was saved (fuse_file, hypatia-fuse:
# report mlp 2, file 1 fused_mlp). Seed 0, program 31, shrunk.
DEAD_CHAIN = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 8, bias=True)
        self.fc5 = nn.Linear(8, 3, bias=True)
        self.fc9 = nn.Linear(3, 4, bias=True)
        self.fc16 = nn.Linear(3, 1, bias=True)
        self.fc19 = nn.Linear(1, 16, bias=True)
    def forward(self, x):
        h2 = self.fc1(x)
        h3 = F.dropout(h2, 0.0, self.training)
        h4 = torch.relu(h3)
        h6 = self.fc5(h4)
        h7 = F.dropout(h6, 0.2, self.training)
        h8 = F.relu(h7)
        h10 = self.fc9(h8)
        h11 = F.relu(h10, inplace=True)
        h17 = self.fc16(h7)
        h18 = F.relu(h17, inplace=True)
        h20 = self.fc19(h18)
        h21 = F.dropout(h20, 0.2, self.training)
        return h21
"""

# The in-place ReLU of a traced Linear whose result only dead code reads kept the chain alive
# through the dead-code elimination before the passes; fused, the (pure) op became dead, and saving
# the module dropped it: the report of fuse_file / hypatia-fuse counted 3 fused_linear_relu, the file
# had 2. The report now counts the fused nodes left after dead code is removed. Seed 1, program 2796.
DEAD_AFTER_FUSION = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc2 = nn.Linear(1, 8, bias=True)
        self.act5 = nn.ReLU(inplace=True)
        self.fc8 = nn.Linear(4, 16, bias=False)
        self.fc11 = nn.Linear(1, 1, bias=True)
        self.fc12 = nn.Linear(1, 8, bias=True)
        self.fc13 = nn.Linear(8, 8, bias=True)
    def forward(self, x):
        h1 = x.unsqueeze(0)
        h3 = self.fc2(h1)
        h4 = self.act5(h3)
        h6, h7 = h4.chunk(2, dim=-1)
        h9 = self.fc8(h7)
        if self.training:
            h10 = F.relu(self.fc11(h1))
        else:
            h10 = h1 * 2.0
        return {'a0': h10, 'b1': h1}
    @torch.jit.export
    def aux(self, x):
        return self.fc13(F.relu(self.fc12(x))).relu()
"""

CASES = {
    "exported_method_kept_by_freeze": (EXPORTED_METHOD, {
        "shape": [3, 16], "dtype": "float32", "methods": ["forward", "aux"],
        "variants": ["script/eval/api+freeze", "script/eval/file+freeze", "script/eval/cli+freeze",
                     "trace/eval/api+freeze+ofi", "script/eval/api+freeze+saveload"]}),
    "dead_chain_not_counted": (DEAD_CHAIN, {
        "shape": [1, 12], "dtype": "float64",
        "variants": ["trace/train/file", "trace/train/cli", "trace/train/api", "trace/eval/file+freeze",
                     "script/train/file"]}),
    "dead_after_fusion_not_counted": (DEAD_AFTER_FUSION, {
        "shape": [1, 1], "dtype": "float64", "methods": ["forward", "aux"],
        "variants": ["trace/eval/file+nomlp+ofi+saveload+grad", "trace/eval/file+nomlp", "trace/eval/cli+nomlp",
                     "trace/eval/file", "trace/eval/api+nomlp", "trace/eval/file+freeze"]}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_regression(name):
    source, case = CASES[name]
    results = fuzz_passes.check_program(source, case)
    bad = [r for r in results if r[1] not in ("ok", "ref-failed")]
    assert not bad, bad
    assert any(r[1] == "ok" for r in results), results
