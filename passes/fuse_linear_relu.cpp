#include "passes/fuse_linear_relu.h"

#include "passes/linear_chain.h"

namespace hypatia {

void FuseLinearReLU(const std::shared_ptr<torch::jit::Graph>& graph, FusionReport& report) {
  const auto chains = passes::find_chains(graph, passes::ChainKind::kLinearReLU, report.skipped);
  passes::rewrite_chains(*graph, chains);
  report.linear_relu += static_cast<int>(chains.size());
}

}  // namespace hypatia
