// hypatia::fuse and FusionReport: runs the passes over a module's (or one graph's) code.
#include <hypatia/fuse.h>

#include "passes/fuse_linear_relu.h"
#include "passes/fuse_mlp.h"
#include "io/text.h"

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace hypatia {
namespace {

void add(FusionReport& into, const FusionReport& from) {
  into.linear_relu += from.linear_relu;
  into.mlp += from.mlp;
  into.mlp_layers += from.mlp_layers;
  into.skipped.insert(into.skipped.end(), from.skipped.begin(), from.skipped.end());
}

void collect_fused_nodes(torch::jit::Block& block, std::vector<torch::jit::Node*>& out) {
  for (torch::jit::Node* n : block.nodes()) {
    if (n->kind() == fused_linear_relu_symbol() || n->kind() == fused_mlp_symbol()) {
      out.push_back(n);
    }
    for (torch::jit::Block* sub : n->blocks()) {
      collect_fused_nodes(*sub, out);
    }
  }
}

// Sets the counts of `report` to the fused nodes in `graph` that are not in `before`.
void count_new_fused_nodes(
    torch::jit::Graph& graph, const std::unordered_set<torch::jit::Node*>& before, FusionReport& report) {
  report.linear_relu = report.mlp = report.mlp_layers = 0;
  for (torch::jit::Node* n : fused_nodes(*graph.block())) {
    if (before.count(n)) {
      continue;
    }
    if (n->kind() == fused_mlp_symbol()) {
      ++report.mlp;
      report.mlp_layers += static_cast<int>(n->input(1)->node()->inputs().size());  // the pass's ListConstruct
    } else {
      ++report.linear_relu;
    }
  }
}

}  // namespace

const c10::Symbol& fused_linear_relu_symbol() {
  static const auto symbol = c10::Symbol::fromQualString("hypatia::fused_linear_relu");
  return symbol;
}

const c10::Symbol& fused_mlp_symbol() {
  static const auto symbol = c10::Symbol::fromQualString("hypatia::fused_mlp");
  return symbol;
}

std::vector<torch::jit::Node*> fused_nodes(torch::jit::Block& block) {
  std::vector<torch::jit::Node*> nodes;
  collect_fused_nodes(block, nodes);
  return nodes;
}

std::string FusionReport::to_string() const {
  std::string out = "fused: " + std::to_string(linear_relu) + " fused_linear_relu, " + std::to_string(mlp) +
      " fused_mlp (" + std::to_string(mlp_layers) + " linear layers); skipped: " + std::to_string(skipped.size());
  for (const auto& why : skipped) {
    out += "\n  skipped " + why;
  }
  return out;
}

std::string FusionReport::to_json() const {
  std::string out = "{\"linear_relu\": " + std::to_string(linear_relu) + ", \"mlp\": " + std::to_string(mlp) +
      ", \"mlp_layers\": " + std::to_string(mlp_layers) + ", \"skipped\": [";
  for (size_t i = 0; i < skipped.size(); ++i) {
    out += (i ? ", " : "") + json_string(skipped[i]);
  }
  return out + "]}";
}

FusionReport fuse_graph(const std::shared_ptr<torch::jit::Graph>& graph, const FuseOptions& options) {
  FusionReport report;
  // Chains first, so that their leading Linear+ReLU pairs are not taken one by one.
  if (options.mlp) {
    FuseMLP(graph, report);
  }
  FuseLinearReLU(graph, report);
  return report;
}

FusionReport fuse(torch::jit::Module& module, const FuseOptions& options) {
  // A copy with its own type and methods, sharing the tensors: editing the graphs in place would
  // also change every module of the same (shared) type, and not reach executors already built.
  torch::jit::Module fused = module.clone(/*inplace=*/true);
  if (options.freeze) {
    // Module::eval() insists on a `training` attribute, which modules built in C++ may lack.
    for (auto m : fused.modules()) {
      if (m.hasattr("training")) {
        m.setattr("training", false);
      }
    }
    // Every method survives, as it is fused below: torch::jit::freeze keeps only forward unless
    // told otherwise, and dropped the module's @torch.jit.export methods.
    std::vector<std::string> methods;
    for (const auto& method : fused.get_methods()) {
      if (method.name() != "forward") {
        methods.push_back(method.name());
      }
    }
    fused = torch::jit::freeze(fused, methods);
  }
  FusionReport report;
  for (const auto& method : fused.get_methods()) {
    auto graph = method.graph();
    // Submodule calls (prim::CallMethod) become their bodies; parameters stay prim::GetAttr.
    torch::jit::Inline(*graph);
    // Inlined F.relu leaves `if inplace: relu_ else: relu` on a constant: keep the branch taken.
    torch::jit::ConstantPropagation(graph);
    // Dead chains (a traced in-place ReLU on a value nothing reads survives ConstantPropagation)
    // would become fused nodes that the report counts and that saving the module drops.
    torch::jit::EliminateDeadCode(graph);
    const auto existing = fused_nodes(*graph->block());
    const std::unordered_set<torch::jit::Node*> before(existing.begin(), existing.end());
    FusionReport method_report = fuse_graph(graph, options);
    // A fused op is pure where the in-place ReLU it replaced was not, so a chain whose result
    // nothing reads (a traced relu_ feeding only dead code) only becomes dead now: remove it, and
    // count the fused nodes that remain, as saving and loading the module would find them.
    torch::jit::EliminateDeadCode(graph);
    count_new_fused_nodes(*graph, before, method_report);
    add(report, method_report);
  }
  module = fused;
  return report;
}

}  // namespace hypatia
