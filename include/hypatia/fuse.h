#pragma once
// hypatia::fuse — rewrites a TorchScript module so that Linear+ReLU and Linear/ReLU chains
// call hypatia::fused_linear_relu / hypatia::fused_mlp. Whatever cannot be proven safe is left as it was.
#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace hypatia {

struct FuseOptions {
  bool freeze = false;  // torch::jit::freeze first (eval mode, weights become constants): inference only
  bool mlp = true;      // also fuse whole chains into fused_mlp (else only fused_linear_relu)
};

struct FusionReport {
  int linear_relu = 0;  // hypatia::fused_linear_relu nodes created
  int mlp = 0;          // hypatia::fused_mlp nodes created
  int mlp_layers = 0;   // linear layers folded into those fused_mlp nodes
  std::vector<std::string> skipped;  // one line per candidate left alone, with the reason
  std::string to_string() const;     // human-readable summary
  std::string to_json() const;
};

// Fuses `module` and returns what was done. `module` is replaced by a fused copy whose
// methods' graphs have their submodule calls inlined and fused; the copy shares the original's
// parameters and buffers (same tensors: it trains them), so the original, other modules of its
// type and executors it already built stay as they were. With options.freeze, the copy is
// frozen first (in eval mode; weights become constants; inference only).
FusionReport fuse(torch::jit::Module& module, const FuseOptions& options = {});

// Fuses one graph in place (FuseMLP when options.mlp, then FuseLinearReLU); no inlining, no
// freezing: options.freeze is ignored.
FusionReport fuse_graph(const std::shared_ptr<torch::jit::Graph>& graph, const FuseOptions& options = {});

// The kinds of the nodes the passes create.
const c10::Symbol& fused_linear_relu_symbol();
const c10::Symbol& fused_mlp_symbol();

// The fused nodes (either kind) of `block` and of the blocks nested in it, in graph order.
std::vector<torch::jit::Node*> fused_nodes(torch::jit::Block& block);

// Opt-in: from now on, TorchScript graphs run by the graph executor in this process are
// fused through its custom-pass hook. Idempotent.
void enable_auto_fusion();

}  // namespace hypatia
