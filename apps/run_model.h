#pragma once
// hypatia-run's models: a TorchScript module (MODEL.pt) or an AOTInductor package (MODEL.pt2, as
// torch._inductor.aoti_compile_and_package writes it), loaded, checked against the inputs before
// anything runs, and called.
#include "apps/run_inputs.h"

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch::inductor {
class AOTIModelPackageLoader;
}

namespace hypatia::run {

struct NodeCounts {
  int linear_relu = 0;
  int mlp = 0;
};

class Model {
 public:
  // Loads `path`. A path ending in .pt2 is an AOTInductor package
  // (torch::inductor::AOTIModelPackageLoader, on `device`, with `runners` model instances so that
  // as many threads can run it at once); its dtypes are compiled in, so `dtype` must be empty.
  // Anything else is a TorchScript file (hypatia::load_module: checked), whose tensors are moved
  // to `device` and, with `dtype`, cast (hypatia::convert_module).
  static Model load(const std::string& path, std::string label, c10::Device device,
                    std::optional<at::ScalarType> dtype, size_t runners);
  // A TorchScript module already loaded (e.g. a fused copy of another model).
  Model(std::string path, std::string label, torch::jit::Module module);

  const std::string& path() const { return path_; }
  const std::string& label() const { return label_; }
  bool is_package() const { return package_ != nullptr; }
  torch::jit::Module& module();  // TorchScript only

  // Calls forward on the current device and stream: a package's outputs come back as a tuple
  // of tensors, or one tensor where its call spec returns one.
  c10::IValue forward(const Inputs& inputs) const;

  // The names of forward's arguments (a package's inputs are in0, in1, ...).
  std::vector<std::string> input_names() const;
  // "src: Tensor, tgt: Tensor, mask: Optional[Tensor] = None", or "N tensors" for a package.
  std::string signature() const;
  // Throws UsageError unless `inputs` fit forward: their number, names and types.
  void check_inputs(const Inputs& inputs) const;
  // The width of the default [batch, features] input, for TorchScript models whose first layer
  // reads it: the first parameter (a Linear weight [out, in] gives in, a LayerNorm weight [d] gives
  // d) or, in frozen graphs, the first linear, layer_norm or hypatia op that reads the input.
  std::optional<int64_t> infer_features() const;
  // hypatia ops in forward (submodule calls inlined), or the package's calls to them (the extern
  // kernel nodes its proxy executor runs).
  NodeCounts hypatia_nodes() const;

 private:
  Model(std::string path, std::string label);

  std::string path_;
  std::string label_;
  std::optional<torch::jit::Module> module_;
  std::shared_ptr<torch::inductor::AOTIModelPackageLoader> package_;
  size_t package_inputs_ = 0;
  bool package_returns_tensor_ = false;
};

// Whether `path` names an AOTInductor package (ends in .pt2).
bool is_package_path(const std::string& path);

}  // namespace hypatia::run
