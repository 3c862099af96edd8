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

# The CPU backward of fused_linear_relu / fused_mlp sized its row blocks by dividing by the widest
# layer width: with nn.Linear(0, 0) (an empty batch transposed into the feature dimension) that is 0,
# and the backward died of SIGFPE (the fuzzer saw a dead worker, then misreported it as hung).
# Seed 1, program 4009, shrunk.
ZERO_FEATURE_BACKWARD = """
class Sub11(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4, bias=True)
    def forward(self, y):
        z = F.relu(self.a(y))
        return self.b(z)

class Sub17(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 16)
        self.b = nn.Linear(16, 4, bias=True)
    def forward(self, y):
        return self.b(torch.relu(self.a(y)))

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc5 = nn.Linear(0, 0, bias=True)
        self.fc7 = nn.Linear(0, 4, bias=True)
        self.sub13 = Sub11()
        self.sub15 = self.sub13
        self.sub18 = Sub17()
        self.fc20 = nn.Linear(1, 16, bias=True)
        self.fc21 = nn.Linear(16, 3, bias=False)
    def forward(self, x):
        h1 = x * 0.5
        h3 = h1
        h4 = h3.transpose(-2, -1)
        h6 = h4
        for _ in range(1):
            h6 = F.relu(self.fc5(h6))
        h8 = self.fc7(h6)
        h14 = self.sub13(h8)
        h16 = torch.relu(self.sub15(h14))
        h19 = self.sub18(h16)
        return h19
    @torch.jit.export
    def aux(self, x):
        return self.fc21(F.relu(self.fc20(x))).relu()
"""

# Not bugs of the passes: programs where the fuzzer's oracle had to change (see fuzz_passes' docstring).
# Seed 1, program 3912: F.dropout(h18, 0.0, ...) returns h18 itself, so relu_ writes h18 in eager mode
# and in the scripted module's first call; its optimised call differentiates dropout as
# native_dropout (a fresh tensor) and gives another result, without the library too. The fused
# module keeps eager's result; the reference is no oracle for its second call (pytorch-unstable).
DROPOUT_ALIAS_UNSTABLE = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 1, bias=True)
        self.fc8 = nn.Linear(1, 8, bias=True)
        self.act11 = nn.ReLU()
        self.fc12 = nn.Linear(8, 3, bias=True)
        self.act15 = nn.ReLU()
        self.fc17 = nn.Linear(3, 33, bias=False)
        self.fc22 = nn.Linear(1, 3, bias=True)
    def forward(self, x):
        h2 = x
        h3 = h2 + x
        h4 = self.fc1(h3)
        h5 = F.relu(h4)
        h6 = self.fc1(h5)
        h7 = F.relu(h6)
        h9 = self.fc8(h7)
        h10 = self.act11(h9)
        h13 = self.fc12(h10)
        h14 = self.act15(h13)
        h16 = h14.unsqueeze(0)
        h18 = self.fc17(h16)
        h19 = F.dropout(h18, 0.0, self.training)
        h20 = h19.relu_()
        h21 = h20 + h18
        return {'a0': h21, 'b1': h16}
    @torch.jit.export
    def aux(self, x):
        return self.fc17(F.relu(self.fc22(x))).relu()
"""

# Seed 1, program 7118 (float16): the unfused reference is 8.4e-3 from float64, the fused 2.2e-3.
HALF_OUTPUT_CANCELS = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc4 = nn.Linear(16, 1, bias=True)
        self.fc6 = nn.Linear(1, 3, bias=True)
    def forward(self, x):
        h1 = x.reshape(2, 2, 2, 2, 8)
    @torch.jit.export
    def aux(self, x):
        return self.fc6(F.relu(self.fc4(x))).relu()
"""

# Seed 0, program 762 (float16, grad of fc3.bias): the unfused reference is 0.145 from float64, the fused 0.001.
HALF_GRAD_REFERENCE_OFF = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc3 = nn.Linear(8, 8, bias=True)
        self.fc4 = nn.Linear(8, 16, bias=False)
        self.fc7 = nn.Linear(16, 33, bias=False)
        self.act11 = nn.ReLU()
        self.fc13 = nn.Linear(33, 33, bias=True)
        self.fc16 = nn.Linear(8, 3, bias=True)
        self.fc17 = nn.Linear(3, 8, bias=True)
    def forward(self, x):
        h1 = x.transpose(0, 1)
        if h1.numel() > 0:
            h2 = F.relu(self.fc3(h1))
        else:
            h2 = h1 * 2.0
        h5 = self.fc4(h2)
        h6 = h5.relu()
        h8 = self.fc7(h6)
        h9 = torch.relu(h8)
        h10 = self.act11(h9)
        h12 = h10 + h8
        h14 = self.fc13(h12)
        h15 = F.relu(h14)
        return (h15,)
    @torch.jit.export
    def aux(self, x):
        return self.fc17(F.relu(self.fc16(x))).relu()
"""

# Seed 1, program 13829 (float32, crash): a frozen model differentiated w.r.t. its input, whose view
# h1 is written after the fused chain read it; the ops saved the input although no weight gradient
# needed it, and the backward failed the version check where eager's linear saves nothing of it.
INPUT_VIEW_WRITTEN_AFTER_CALL = """
class Sub6(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(33, 8)
        self.b = nn.Linear(8, 33, bias=False)
    def forward(self, y):
        return self.b(F.relu(self.a(y)))

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc2 = nn.Linear(1, 33, bias=True)
        self.act5 = nn.ReLU()
        self.sub7 = Sub6()
    def forward(self, x):
        h1 = x.unsqueeze(0)
        h3 = self.fc2(h1)
        h4 = self.act5(h3)
        h8 = self.sub7(h4)
        h1.add_(1.0)
        return (h8,)
"""

# Seed 1, program 14736 (float16): a program that writes to its input, whose unfused reference is
# further from float64 than the fused module (the oracle's float64 check skipped such programs).
HALF_INPUT_WRITTEN = """
class Inner2(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)
    def forward(self, z):
        return self.act(self.l(z))

class Sub1(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(1, 4)
        self.b = nn.Linear(4, 1, bias=True)
        self.inner = Inner2()
    def forward(self, y):
        z = F.relu(self.a(y))
        return self.b(z)

class Inner8(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)
        self.act = nn.ReLU()
    def forward(self, z):
        return self.act(self.l(z))

class Sub7(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(1, 4)
        self.b = nn.Linear(4, 1, bias=True)
        self.inner = Inner8()
    def forward(self, y):
        z = F.relu(self.a(y))
        z = self.inner(z)
        return self.b(z)

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub3 = Sub1()
        self.fc5 = nn.Linear(1, 1, bias=False)
        self.sub9 = Sub7()
        self.fc11 = nn.Linear(1, 16, bias=True)
        self.fc12 = nn.Linear(16, 3, bias=True)
    def forward(self, x):
        x.add_(1.0)
        h4 = self.sub3(x)
        h6 = h4
        for _ in range(2):
            h6 = F.relu(self.fc5(h6))
        h10 = self.sub9(h6)
        return h10
    @torch.jit.export
    def aux(self, x):
        return self.fc12(F.relu(self.fc11(x))).relu()
"""

# Seed 1, program 15560 (bfloat16): the same (a returned value ReLU'd in place, the input written).
BF16_INPUT_WRITTEN = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 1, bias=True)
        self.fc7 = nn.Linear(1, 33, bias=True)
        self.fc11 = nn.Linear(4, 1, bias=True)
        self.fc13 = nn.Linear(1, 3, bias=True)
        self.fc16 = nn.Linear(3, 3, bias=False)
        self.act20 = nn.ReLU(inplace=True)
        self.fc21 = nn.Linear(3, 16, bias=True)
    def forward(self, x):
        h12 = self.fc11(x)
        h14 = self.fc13(h12)
        h15 = F.relu(h14, inplace=True)
        h17 = self.fc16(h15)
        h18 = self.fc16(h17)
        h19 = self.act20(h18)
        h22 = self.fc21(h19)
        h23 = h22.relu_()
        x.relu_()
        return [h23, h18]
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
    "input_view_written_after_call": (INPUT_VIEW_WRITTEN_AFTER_CALL, {
        "shape": [1, 1], "dtype": "float32",
        "variants": ["trace/eval/file+freeze+grad", "trace/eval/file+ofi+grad", "trace/eval/api+freeze+grad",
                     "trace/eval/api+nomlp+freeze+grad"]}),
    "zero_feature_backward": (ZERO_FEATURE_BACKWARD, {
        "shape": [0, 1], "dtype": "float32", "methods": ["forward", "aux"],
        "variants": ["script/eval/api+ofi+grad", "script/eval/api+grad", "script/train/api+grad",
                     "script/eval/api+nomlp+grad"]}),
}

# Oracle cases: (source, case, the status each variant must have).
ORACLE_CASES = {
    "dropout_alias_unstable": (DROPOUT_ALIAS_UNSTABLE, {
        "shape": [1, 1, 1], "dtype": "float32", "methods": ["forward", "aux"],
        "variant": "script/train/api+saveload+grad"}, "pytorch-unstable"),
    "half_output_cancels": (HALF_OUTPUT_CANCELS, {
        "shape": [2, 2, 2, 16], "dtype": "float16", "methods": ["forward", "aux"],
        "variant": "script/eval/file+freeze+ofi+grad"}, "ok"),
    "half_input_written": (HALF_INPUT_WRITTEN, {
        "shape": [1, 1], "dtype": "float16", "methods": ["forward", "aux"],
        "variant": "trace/eval/api+freeze+nomlp+ofi+saveload+grad"}, "ok"),
    "bf16_input_written": (BF16_INPUT_WRITTEN, {
        "shape": [4], "dtype": "bfloat16", "variant": "trace/eval/file+freeze+nomlp+ofi"}, "ok"),
    "half_grad_reference_off": (HALF_GRAD_REFERENCE_OFF, {
        "shape": [2, 5, 8], "dtype": "float16", "methods": ["forward", "aux"],
        "variant": "script/train/api+nomlp+grad"}, "ok"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_regression(name):
    source, case = CASES[name]
    results = fuzz_passes.check_program(source, case)
    bad = [r for r in results if r[1] not in ("ok", "ref-failed")]
    assert not bad, bad
    assert any(r[1] == "ok" for r in results), results


@pytest.mark.parametrize("name", sorted(ORACLE_CASES))
def test_fuzz_oracle_case(name):
    source, case, status = ORACLE_CASES[name]
    results = fuzz_passes.check_program(source, case)
    assert [r[1] for r in results] == [status], results
