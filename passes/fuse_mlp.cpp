#include "passes/fuse_mlp.h"

#include "passes/linear_chain.h"

namespace hypatia {

void FuseMLP(const std::shared_ptr<torch::jit::Graph>& graph, FusionReport& report) {
  const auto chains = passes::find_chains(graph, passes::ChainKind::kMLP, report.skipped);
  passes::rewrite_chains(*graph, chains);
  report.mlp += static_cast<int>(chains.size());
  for (const auto& chain : chains) {
    report.mlp_layers += static_cast<int>(chain.layers.size());
  }
}

}  // namespace hypatia
