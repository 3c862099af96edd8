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

CASES = {
    "exported_method_kept_by_freeze": (EXPORTED_METHOD, {
        "shape": [3, 16], "dtype": "float32", "methods": ["forward", "aux"],
        "variants": ["script/eval/api+freeze", "script/eval/file+freeze", "script/eval/cli+freeze",
                     "trace/eval/api+freeze+ofi", "script/eval/api+freeze+saveload"]}),
    "dead_chain_not_counted": (DEAD_CHAIN, {
        "shape": [1, 12], "dtype": "float64",
        "variants": ["trace/train/file", "trace/train/cli", "trace/train/api", "trace/eval/file+freeze",
                     "script/train/file"]}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_regression(name):
    source, case = CASES[name]
    results = fuzz_passes.check_program(source, case)
    bad = [r for r in results if r[1] not in ("ok", "ref-failed")]
    assert not bad, bad
    assert any(r[1] == "ok" for r in results), results
