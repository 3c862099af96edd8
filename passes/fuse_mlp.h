#pragma once
// FuseMLP: chains linear -> relu -> linear (-> relu -> linear ...) [-> relu] of two or more
// layers, in the spellings FuseLinearReLU knows, -> one hypatia::fused_mlp (relu_last when the
// chain ends with a ReLU), when every intermediate has no other use, all nodes sit in one block
// and nothing in between writes to the operands. Eval-mode dropouts (constant train=False) are
// dropped. Descends into nested blocks; idempotent.
#include <hypatia/fuse.h>

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace hypatia {

// Adds what it creates to report.mlp / report.mlp_layers and the chains it leaves to report.skipped.
void FuseMLP(const std::shared_ptr<torch::jit::Graph>& graph, FusionReport& report);

}  // namespace hypatia
