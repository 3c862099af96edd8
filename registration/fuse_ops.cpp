// Private ops through which Python reaches the TorchScript passes, so that no Python extension
// module is needed: torch.ops.hypatia._fuse_module(script_module._c, freeze, mlp),
// torch.ops.hypatia._fuse_file(src, dst, freeze, mlp) and torch.ops.hypatia._enable_auto_fusion().
#include "io/model_file.h"
#include <hypatia/fuse.h>

#include <ATen/core/stack.h>
#include <torch/library.h>

namespace {

// (Any module, bool freeze, bool mlp) -> (Any fused_module, str report_json)
void fuse_module(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  const bool mlp = torch::jit::pop(*stack).toBool();
  const bool freeze = torch::jit::pop(*stack).toBool();
  const c10::IValue module = torch::jit::pop(*stack);
  TORCH_CHECK(
      module.isObject() && module.toObjectRef().type()->is_module(),
      "hypatia::_fuse_module: module must be a ScriptModule (pass script_module._c), but got ",
      module.tagKind());
  torch::jit::Module fused(module.toObject());
  const hypatia::FusionReport report = hypatia::fuse(fused, {freeze, mlp});
  torch::jit::push(*stack, fused._ivalue(), report.to_json());
}

// hypatia-fuse's work: src loaded and checked, fused, saved atomically to dst (never src).
std::string fuse_file(const std::string& src, const std::string& dst, bool freeze, bool mlp) {
  hypatia::check_output_path(dst, src);
  torch::jit::Module module = hypatia::load_module(src);
  const hypatia::FusionReport report = hypatia::fuse(module, {freeze, mlp});
  hypatia::save_module(module, dst, src);
  return report.to_json();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(hypatia, m) {
  m.def("_fuse_module(Any module, bool freeze, bool mlp) -> (Any, str)",
        torch::CppFunction::makeFromBoxedFunction<&fuse_module>());
  m.def("_fuse_file(str src, str dst, bool freeze, bool mlp) -> str", &fuse_file);
  m.def("_enable_auto_fusion() -> ()", [] { hypatia::enable_auto_fusion(); });
}
