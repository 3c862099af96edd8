#pragma once
// Shared by FuseLinearReLU and FuseMLP: finds Linear (-> ReLU) chains in a graph, proves them safe
// to fuse, and rewrites them. Not a pass by itself.
#include <torch/csrc/jit/ir/ir.h>

#include <optional>
#include <string>
#include <vector>

namespace hypatia::passes {

// One linear layer, in whichever spelling the graph uses.
struct LinearLayer {
  torch::jit::Value* input = nullptr;
  torch::jit::Value* weight = nullptr;  // nullptr when constant_weight holds it
  std::optional<at::Tensor> constant_weight;  // frozen graphs fold t(w) into a constant w.T
  torch::jit::Value* bias = nullptr;  // nullptr: no bias (matmul without add)
  torch::jit::Value* output = nullptr;
  std::vector<torch::jit::Node*> nodes;  // the nodes computing `output` from `input`
  std::vector<torch::jit::Node*> transposes;  // aten::t(weight) nodes, removed once unused
};

// linear -> relu -> linear -> ..., all nodes in one block, every intermediate used once.
struct LinearChain {
  std::vector<LinearLayer> layers;
  bool relu_last = false;
  std::vector<torch::jit::Node*> nodes;  // every node the fused op replaces, in graph order
  torch::jit::Value* output = nullptr;   // what the fused op's output replaces
};

enum class ChainKind {
  kLinearReLU,  // exactly one layer, followed by a ReLU
  kMLP,         // two or more layers, ReLU between them, optionally after the last
};

// Chains of `kind` in `graph` and its nested blocks, each proven safe to fuse. Why a candidate
// was left alone goes to `skipped`: for kLinearReLU, a linear whose output reaches a ReLU; for
// kMLP, a chain of two or more layers.
std::vector<LinearChain> find_chains(
    const std::shared_ptr<torch::jit::Graph>& graph, ChainKind kind, std::vector<std::string>& skipped);

// Replaces each chain by one node of hypatia::fused_linear_relu (one layer) or
// hypatia::fused_mlp. Chains must come from one find_chains call on the unmodified graph.
void rewrite_chains(torch::jit::Graph& graph, const std::vector<LinearChain>& chains);

}  // namespace hypatia::passes
