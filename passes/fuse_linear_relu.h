#pragma once
// FuseLinearReLU: linear -> relu (aten::linear, addmm(b, x, t(w)) or matmul(x, t(w)) [+ b];
// relu or relu_, eval-mode dropouts between them ignored) -> hypatia::fused_linear_relu, when
// the linear output has no other use, all nodes sit in one block and nothing in between writes
// to the operands. Descends into nested blocks; idempotent.
#include <hypatia/fuse.h>

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace hypatia {

// Adds the nodes it creates to report.linear_relu and the candidates it leaves to report.skipped.
void FuseLinearReLU(const std::shared_ptr<torch::jit::Graph>& graph, FusionReport& report);

}  // namespace hypatia
