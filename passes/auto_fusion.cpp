// hypatia::enable_auto_fusion: runs the fusion on every graph the TorchScript executor optimises.
// A post pass: pre passes still see prim::profile nodes, which count as extra uses of every value.
#include <hypatia/fuse.h>

#include <torch/csrc/jit/passes/pass_manager.h>

#include <mutex>

namespace hypatia {

void enable_auto_fusion() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    torch::jit::registerPostPass([](std::shared_ptr<torch::jit::Graph>& graph) { fuse_graph(graph); });
  });
}

}  // namespace hypatia
