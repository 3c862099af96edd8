// Private ops through which Python reaches the TorchScript passes, so that no Python extension
// module is needed: torch.ops.hypatia._fuse_module(script_module._c, freeze, mlp) and
// torch.ops.hypatia._enable_auto_fusion().
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

}  // namespace

TORCH_LIBRARY_FRAGMENT(hypatia, m) {
  m.def("_fuse_module(Any module, bool freeze, bool mlp) -> (Any, str)",
        torch::CppFunction::makeFromBoxedFunction<&fuse_module>());
  m.def("_enable_auto_fusion() -> ()", [] { hypatia::enable_auto_fusion(); });
}
